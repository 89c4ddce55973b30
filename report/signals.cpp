// Series and tables from one run's telemetry (report/signals.h).
#include "report/signals.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace flatline {
namespace {

std::optional<double> field(const Record& r, const std::string& f) {
  if (f == "loss") return r.loss_avg ? r.loss_avg : r.loss;
  if (f == "lr") return r.lr;
  if (f == "grad_norm") return r.grad_norm;
  if (f == "local_grad_norm") return r.local_grad_norm;
  if (f == "loss_scale") return r.loss_scale;
  if (f == "grad_zero_frac") return r.grad_zero_frac;
  if (f == "update_norm") return r.update_norm;
  return std::nullopt;
}

bool is_step(const Record& r) { return r.kind == RecordKind::step; }

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : fmt::format("{}", v); }

}  // namespace

Series step_series(const RunData& run, const std::string& f, int rank) {
  Series s;
  s.name = f;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    if (rank >= 0 && static_cast<int>(r) != rank) continue;
    for (const auto& rec : run.ranks[r])
      if (auto v = is_step(rec) ? field(rec, f) : std::nullopt) {
        s.x.push_back(static_cast<double>(rec.step));
        s.y.push_back(*v);
      }
    if (!s.empty()) break;
  }
  return s;
}

Series eval_loss(const RunData& run) {
  Series s;
  s.name = "eval loss";
  for (const auto& rank : run.ranks) {
    for (const auto& rec : rank)
      if (rec.kind == RecordKind::eval && rec.eval_loss) {
        s.x.push_back(static_cast<double>(rec.step));
        s.y.push_back(*rec.eval_loss);
      }
    if (!s.empty()) break;
  }
  return s;
}

std::vector<Series> local_grad_norms(const RunData& run) {
  std::vector<Series> out;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Series s = step_series(run, "local_grad_norm", static_cast<int>(r));
    s.name = fmt::format("rank {}", r);
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

std::vector<Series> step_vs_time(const RunData& run) {
  std::vector<Series> out;
  Series hb;  // the watchdogs go on beating while a rank hangs: their step shows where it stopped
  hb.name = "heartbeats";
  for (const auto& rank : run.ranks)
    for (const auto& rec : rank)
      if (rec.kind == RecordKind::heartbeat && std::isfinite(rec.t)) {
        hb.x.push_back(rec.t);
        hb.y.push_back(static_cast<double>(rec.step));
      }
  if (!hb.empty()) out.push_back(std::move(hb));
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Series s;
    s.name = fmt::format("rank {}", r);
    for (const auto& rec : run.ranks[r])
      if (is_step(rec) && std::isfinite(rec.t)) {
        s.x.push_back(rec.t);
        s.y.push_back(static_cast<double>(rec.step));
      }
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

Series step_rate(const RunData& run, int bins) {
  Series s;
  s.name = "steps/s";
  if (run.ranks.empty() || bins < 1) return s;
  const auto& recs = run.ranks.front();
  double t_end = 0;
  for (const auto& r : recs)
    if (std::isfinite(r.t)) t_end = std::max(t_end, r.t);
  if (t_end <= 0) return s;
  const double w = t_end / bins;
  size_t i = 0;
  int64_t prev = 0, cur = 0;
  for (int b = 0; b < bins; ++b) {
    const double hi = w * (b + 1);
    for (; i < recs.size() && !(recs[i].t > hi); ++i)
      if (is_step(recs[i]) && std::isfinite(recs[i].t)) cur = recs[i].step;
    s.x.push_back(w * (b + 0.5));
    s.y.push_back(static_cast<double>(std::max<int64_t>(0, cur - prev)) / w);
    prev = cur;
  }
  return s;
}

std::string liveness_table(const RunData& run) {
  std::string out = fmt::format("{:<5} {:>9} {:>12} {:>12} {:>24} {:>16}\n", "rank", "max step", "reached t",
                                "last step t", "last heartbeat", "longest gap");
  std::vector<std::string> ends;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    int64_t max_step = -1;
    double reached = NAN, last_t = NAN, prev_t = NAN, gap = 0, gap_at = NAN;
    const Record* hb = nullptr;
    for (const auto& rec : run.ranks[r]) {
      if (rec.kind == RecordKind::heartbeat) hb = &rec;
      if (rec.kind == RecordKind::event && (rec.name == "run_end" || rec.name == "error"))
        ends.push_back(fmt::format("rank {}: {} at t={:.2f} s{}", r, rec.name, rec.t,
                                   rec.detail.empty() ? "" : ": " + rec.detail));
      if (!is_step(rec)) continue;
      if (rec.step > max_step) {
        max_step = rec.step;
        reached = rec.t;
      }
      if (std::isfinite(prev_t) && rec.t - prev_t > gap) {
        gap = rec.t - prev_t;
        gap_at = rec.step;
      }
      prev_t = last_t = rec.t;
    }
    const std::string hbs =
        hb ? fmt::format("t={:.2f} step {} {}", hb->t, hb->step, hb->phase) : std::string("none");
    const std::string gaps = std::isfinite(gap_at) ? fmt::format("{:.2f} s @{}", gap, gap_at) : "-";
    out += fmt::format("{:<5} {:>9} {:>12.2f} {:>12.2f} {:>24} {:>16}\n", r, max_step, reached, last_t, hbs, gaps);
  }
  for (const auto& e : ends) out += e + "\n";
  return out;
}

std::string ranks_table(const RunData& run) {
  std::string out = fmt::format("{:<5} {:>16} {:>16} {:>11} {:>11}\n", "rank", "median (all)", "median (last 20)",
                                "zero steps", "first zero");
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Series s = step_series(run, "local_grad_norm", static_cast<int>(r));
    if (s.empty()) {
      out += fmt::format("{:<5} {:>16}\n", r, "no local_grad_norm logged");
      continue;
    }
    std::vector<double> tail(s.y.end() - std::min<size_t>(20, s.y.size()), s.y.end());
    int zeros = 0;
    double first = NAN;
    for (size_t i = 0; i < s.y.size(); ++i)
      if (s.y[i] <= 1e-12) {
        if (!zeros++) first = s.x[i];
      }
    out += fmt::format("{:<5} {:>16} {:>16} {:>11} {:>11}\n", r, num(median(s.y)), num(median(tail)), zeros,
                       std::isfinite(first) ? fmt::format("{}", first) : "-");
  }
  return out;
}

std::string data_table(const RunData& run) {
  std::string out;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    std::map<uint64_t, int64_t> seen;  // hash -> first step
    int hashed = 0, repeats = 0, reruns = 0;
    std::vector<std::string> first;
    for (const auto& rec : run.ranks[r]) {
      if (!is_step(rec) || !rec.batch_hash) continue;
      ++hashed;
      auto [it, fresh] = seen.emplace(*rec.batch_hash, rec.step);
      if (fresh) continue;
      if (it->second == rec.step) {
        ++reruns;  // the same step trained again after a restart: the same batch is right
      } else if (++repeats <= 3) {
        first.push_back(fmt::format("step {} repeats batch {:016x} of step {}", rec.step, *rec.batch_hash, it->second));
      }
    }
    if (!hashed) {
      out += fmt::format("rank {}: no batch_hash logged\n", r);
      continue;
    }
    out += fmt::format("rank {}: {} batches hashed, {} distinct, {} repeat(s) of an earlier step, {} re-run(s) of the "
                       "same step\n", r, hashed, seen.size(), repeats, reruns);
    for (const auto& f : first) out += "    " + f + "\n";
  }
  return out;
}

std::string scale_table(const RunData& run) {
  Series sc = step_series(run, "loss_scale");
  if (sc.empty()) return "no loss_scale logged\n";
  const int rank = 0;
  int overflows = 0, skipped = 0, streak = 0, longest = 0;
  int64_t streak_from = -1, longest_from = -1, longest_to = -1;
  for (const auto& rec : run.ranks[rank]) {
    if (!is_step(rec)) continue;
    overflows += rec.overflow.value_or(false);
    if (rec.skipped.value_or(false)) {
      ++skipped;
      if (streak++ == 0) streak_from = rec.step;
      if (streak > longest) longest = streak, longest_from = streak_from, longest_to = rec.step;
    } else {
      streak = 0;
    }
  }
  const auto [lo, hi] = std::minmax_element(sc.y.begin(), sc.y.end());
  Series zf = step_series(run, "grad_zero_frac");
  std::string out = fmt::format("loss scale: first {}, min {}, max {}, last {}\n", num(sc.y.front()), num(*lo),
                                num(*hi), num(sc.y.back()));
  out += fmt::format("overflow steps: {}, skipped steps: {}", overflows, skipped);
  if (longest > 0) out += fmt::format(", longest skip streak {} (steps {}..{})", longest, longest_from, longest_to);
  out += "\n";
  if (!zf.empty()) out += fmt::format("fraction of zero gradient elements at the last step: {}\n", num(zf.y.back()));
  return out;
}

std::string eval_table(const RunData& run) {
  Series e = eval_loss(run);
  if (e.empty()) return "no eval records (eval not enabled in this run)\n";
  std::string out = fmt::format("{:>8} {:>10}\n", "step", "eval loss");
  const size_t n = e.x.size(), stride = (n + 11) / 12;
  for (size_t i = 0; i < n; i += stride) out += fmt::format("{:>8} {:>10.4f}\n", e.x[i], e.y[i]);
  if ((n - 1) % stride) out += fmt::format("{:>8} {:>10.4f}\n", e.x.back(), e.y.back());
  return out;
}

}  // namespace flatline
