// Plateau (plateau.h): two-half mean comparison over the last W loss values.
#include "detectors/plateau.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace flatline {
namespace {

constexpr size_t kMaxSteps = 20000;  // values kept (the oldest are dropped)
constexpr size_t kStride = 5;        // steps between spans when looking for flat_since
constexpr double kKneeErrs = 3.0;    // a span descending by more than this many errors has the knee
constexpr size_t kMisses = 2;        // such spans in a row end the flat stretch
constexpr double kStdErrs = 2.0;     // drop below this many standard errors = flat
constexpr int kOwnLoss = 1 << 20;    // a rank's own loss ranks after any loss_avg
constexpr size_t kHead = 20;         // first values kept aside: where the loss started
constexpr double kDescentErrs = 3.0; // below the start by more than this many errors: it descended
constexpr size_t kMinValues = 10;    // fewer loss values than this: no judgement at all (plateau.h)

struct Window {
  double old_mean, new_mean, sigma, drop, se;
  bool flat;
};

// The `w` values ending at index `end` (exclusive).
Window judge(const std::vector<double>& y, size_t end, size_t w) {
  const size_t b = end - w, h = w / 2;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, so = 0, sn = 0;
  for (size_t i = 0; i < w; ++i) {
    const double x = static_cast<double>(i), v = y[b + i];
    sx += x, sy += v, sxx += x * x, sxy += x * v;
    (i < h ? so : sn) += v;
  }
  const double n = static_cast<double>(w);
  const double den = n * sxx - sx * sx;
  const double slope = den != 0 ? (n * sxy - sx * sy) / den : 0, icpt = (sy - slope * sx) / n;
  double ss = 0;
  for (size_t i = 0; i < w; ++i) {
    const double e = y[b + i] - (icpt + slope * static_cast<double>(i));
    ss += e * e;
  }
  Window r;
  r.old_mean = so / static_cast<double>(h);
  r.new_mean = sn / static_cast<double>(w - h);
  r.sigma = std::sqrt(ss / (n - 2));
  r.drop = r.old_mean - r.new_mean;
  r.se = r.sigma * std::sqrt(1.0 / static_cast<double>(h) + 1.0 / static_cast<double>(w - h));
  r.flat = !(r.drop > kStdErrs * r.se);
  return r;
}

}  // namespace

void Plateau::observe(const Record& r) {
  // A log of held-out losses only (a Lightning CSV of validation rows): they are the loss curve, as long
  // as no training loss has come.
  if (r.kind == RecordKind::eval && r.rank >= 0 && r.eval_loss && std::isfinite(*r.eval_loss) && !train_seen_) {
    observe_value(r.rank, r.step, *r.eval_loss, std::nan(""));
    eval_only_ = true;
    return;
  }
  if (r.kind != RecordKind::step || r.rank < 0) return;
  observe_row(r.rank, r.step, r.loss ? *r.loss : std::nan(""), r.loss_avg ? *r.loss_avg : std::nan(""));
}

void Plateau::observe_row(int rank, int64_t step, double loss, double loss_avg) {
  if (std::isfinite(loss_avg) || std::isfinite(loss)) {
    if (eval_only_) {  // training losses after all: the curve is theirs
      series_.clear(), head_.clear(), has_last_ = false;
      eval_only_ = false;
    }
    train_seen_ = true;
  }
  observe_value(rank, step, loss, loss_avg);
}

void Plateau::observe_block(const StepBlock& b) {
  const size_t n = b.rows();
  if (!b.lockstep) {
    for (size_t i = 0; i < n; ++i)
      if (b.rank[i] >= 0) observe_row(b.rank[i], b.step[i], b.loss[i], b.loss_avg[i]);
    return;
  }
  // One step, ranks in order: a row without a loss changes nothing; the first row with one opens the step
  // (the head keeps its value); later rows replace the value only with a lower priority (a lower rank's
  // loss_avg, then a lower rank's own loss), so the step ends with the first row's value unless a row
  // with a loss_avg follows a first row that had only its own loss.
  size_t first = n, best = n;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(b.loss_avg[i])) {
      best = i;
      break;
    }
    if (first == n && std::isfinite(b.loss[i])) first = i;
  }
  if (first == n) first = best;
  if (first == n) return;  // no row has a loss
  observe_row(b.rank[first], b.step[first], b.loss[first], b.loss_avg[first]);
  if (best != n && best != first) observe_row(b.rank[best], b.step[best], b.loss[best], b.loss_avg[best]);
}

void Plateau::observe_value(int rank, int64_t step, double loss, double loss_avg) {
  Value v{-1, 0};
  if (std::isfinite(loss_avg)) v = {rank, loss_avg};
  else if (std::isfinite(loss)) v = {kOwnLoss + rank, loss};
  if (v.priority < 0) return;
  if (has_last_ && last_->first == step) {
    if (v.priority <= last_->second.priority) last_->second = v;
    return;
  }
  if (head_.size() < kHead && (head_.empty() || step > head_.back().first)) head_.emplace_back(step, v.v);
  auto [it, inserted] = series_.try_emplace(step, v);  // no node allocated for a step already there
  if (!inserted && v.priority <= it->second.priority) it->second = v;  // same source again: a restart's value
  last_ = it;
  has_last_ = true;
  while (series_.size() > kMaxSteps) {
    if (series_.begin() == last_) has_last_ = false;
    series_.erase(series_.begin());
  }
}

PlateauStatus Plateau::status() const {
  PlateauStatus st;
  size_t w = static_cast<size_t>(window_);
  if (series_.size() < w) {
    if (series_.size() < kMinValues) {
      st.detail = fmt::format("need {} loss values ({} for a full window), have {}", kMinValues, w, series_.size());
      return st;
    }
    w = series_.size();  // a sparse log: every value it has
    st.sparse = true;
  }
  st.values = static_cast<int>(w);
  std::vector<double> y;
  std::vector<int64_t> steps;
  y.reserve(series_.size());
  for (const auto& [s, v] : series_) {
    steps.push_back(s);
    y.push_back(v.v);
  }
  st.known = true;
  const Window last = judge(y, y.size(), w);
  st.flat = last.flat;
  st.level = last.new_mean;
  st.level_se = last.sigma / std::sqrt(static_cast<double>(w - w / 2));
  st.noise = last.sigma;
  st.first_step = head_.empty() ? steps.front() : head_.front().first;
  st.judged_step = steps[w - 1];
  // The start: the first kHead values kept aside; in a sparse log, its first quarter (at least 3).
  std::vector<double> head;
  if (st.sparse) head.assign(y.begin(), y.begin() + static_cast<long>(std::max<size_t>(3, w / 4)));
  else
    for (const auto& [s0, v] : head_) head.push_back(v);
  if (st.flat && head.size() >= (st.sparse ? 3 : kHead / 2)) {
    double hm = 0, hv = 0;
    for (double v : head) hm += v;
    hm /= static_cast<double>(head.size());
    for (double v : head) hv += (v - hm) * (v - hm);
    hv /= static_cast<double>(head.size() - 1);
    const double se = std::sqrt(hv / static_cast<double>(head.size()) + st.level_se * st.level_se);
    st.never_descended = !(hm - st.level > kDescentErrs * se);
  }
  const int64_t from = steps[y.size() - w], to = steps.back();
  const char* verdict = !last.flat ? "descending" : last.drop < -kStdErrs * last.se ? "rising" : "flat";
  st.detail = fmt::format("loss {:.4g} -> {:.4g} over steps {}..{}, noise {:.2g}: {}", last.old_mean, last.new_mean,
                          from, to, last.sigma, verdict);
  if (st.sparse)
    st.detail += fmt::format(" (sparse: judged on the {} loss values logged, a full window is {})", w, window_);
  if (st.flat) {
    // The flat stretch: grow the judged span back from the latest window while it stays flat as a
    // whole (a longer span has a smaller standard error, so the knee shows as soon as it is included).
    // Overlapping spans share their noise, so a chance excursion lasts several strides: the walk
    // asks for a clearly descending span (kKneeErrs) and stops after kMisses of them in a row.
    size_t span = w;
    for (size_t s = w + kStride, misses = 0; s <= y.size() && misses < kMisses; s += kStride) {
      const Window j = judge(y, y.size(), s);
      if (!(j.drop > kKneeErrs * j.se)) {
        span = s;
        misses = 0;
      } else {
        ++misses;
      }
    }
    st.flat_since = steps[y.size() - span];
    st.detail += fmt::format(" since step {}", st.flat_since);
  }
  return st;
}

}  // namespace flatline
