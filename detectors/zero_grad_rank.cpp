// zero_grad_rank (docs/DESIGN.md §2, cause 5): one data-parallel rank sends zeros into the gradient all-reduce
// (its buffer zeroed before the all-reduce, or backward skipped).
//
// Signal: local_grad_norm (each rank's gradient norm before the all-reduce) of every rank at the
//   same step. A step is judged once every rank has reported it, keyed by (step, n-th time this rank
//   reported that step), so a restart's re-emitted steps pair with each other.
// Window: per rank, the current run of consecutive judged steps at which it was "zero".
// Warm-up: none: a zero gradient on one rank is wrong from step 1.
// Thresholds:
//   a rank is zero at a step when its local_grad_norm == 0 or <= 1e-12 * max(other ranks) while
//   the median of the other ranks is > 0: a rank whose share of the batch merely has small
//   gradients is orders of magnitude above 1e-12 of its peers.
//   fire when the same rank is zero at 2 consecutive judged steps. rank = that rank (the lowest
//   one if several), onset_step = its first zero step, detected_t = the latest t among the ranks'
//   records of that step (the moment the step was complete).
// False-positive guards: all ranks zero together (loss-scale underflow, skipped steps: the median
//   of the others is 0, so the step is not judged); one rank's grads merely small; world size 1
//   (not applicable); inf/NaN norms of an fp16 overflow step (not judged).
// World size: cfg.world_size when > 0; else max rank seen + 1, and a step is judged only once at
//   least 2 ranks reported it (pass world_size when whole rank files may arrive one after another).
#include "detectors/zero_grad_rank.h"

#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace zero_grad_rank;  // its thresholds (detectors/zero_grad_rank.h)
constexpr size_t kMaxPending = 50000; // steps waiting for a missing rank, at most

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();  // a rank whose next step must be counted in full

// Whether `step` extends every rank's open run with no earlier run to count (extends[r] = the run's last
// step; kNever where occurrence() must count); then each rank's extends[r] becomes `step`. Branch-free
// over 64-bit columns, so that it vectorises (out of line: once inlined, GCC 12 no longer vectorises it).
__attribute__((noinline)) bool extend_all(size_t n, int64_t step, int64_t* __restrict extends) {
  size_t off = 0;
  for (size_t r = 0; r < n; ++r) off += !(step > extends[r]) | (extends[r] == kNever);
  if (off) return false;
  for (size_t r = 0; r < n; ++r) extends[r] = step;
  return true;
}

// A step's local grad norms (NaN where not logged or not finite and >= 0); whether any was finite.
__attribute__((noinline)) bool column_values(size_t n, const double* __restrict norms, double* __restrict values) {
  size_t finite = 0;
  for (size_t r = 0; r < n; ++r) {
    const double v = norms[r];
    const int64_t ok = v - v == 0;
    finite += static_cast<size_t>(ok);
    values[r] = (ok & (v >= 0)) != 0 ? v : std::numeric_limits<double>::quiet_NaN();
  }
  return finite > 0;
}

// Whether any finite value is 0 or at most kZeroFrac x the largest (values: finite or NaN, >= 0); false
// when none is finite.
__attribute__((noinline)) bool near_zero(size_t n, const double* __restrict values) {
  // the largest as an integer: the bits of doubles >= 0 order as they do (-0.0 as 0.0, NaN as -1)
  int64_t top = -1;
  for (size_t r = 0; r < n; ++r) {
    int64_t bits;
    std::memcpy(&bits, values + r, sizeof bits);
    bits = values[r] == values[r] ? bits & std::numeric_limits<int64_t>::max() : -1;  // -0.0 as 0.0
    top = bits > top ? bits : top;
  }
  if (top < 0) return false;  // none finite
  double gmax;
  std::memcpy(&gmax, &top, sizeof gmax);
  size_t near = 0;
  for (size_t r = 0; r < n; ++r) near += (values[r] == 0) | (values[r] <= kZeroFrac * gmax);
  return near > 0;
}

class ZeroGradRank final : public BlockDetector {
 public:
  explicit ZeroGradRank(const DetectorConfig& c) : cfg_world_(c.world_size) {}
  const char* cause() const override { return "zero_grad_rank"; }

  void observe_event(const Record&) override {}

  void observe_block(const StepBlock& b) override {
    if (b.rows() == 0) return;
    if (b.lockstep && whole_step(b)) return;
    for (size_t i = 0; i < b.rows(); ++i) row(b, i);
  }

  void row(const StepBlock& b, size_t i) {
    const int rank = b.rank[i];
    const int64_t step = b.step[i];
    if (rank < 0) return;
    if (cfg_world_ > 0 && rank >= cfg_world_) return;
    any_steps_ = true;
    world_ = std::max(world_, cfg_world_ > 0 ? cfg_world_ : rank + 1);
    const double v = b.local_grad_norm[i], t = b.t[i];  // NaN when not logged
    if (std::isfinite(v)) local_seen_ = true;
    if (static_cast<size_t>(rank) >= seen_.size()) seen_.resize(static_cast<size_t>(rank) + 1), extends_.resize(seen_.size(), kNever);
    const int64_t occ = count(static_cast<size_t>(rank), step);
    const std::pair<int64_t, int64_t> key{step, occ};
    // every rank's record of a step arrives in a row: one map lookup per step, not per record
    if (last_ == pending_.end() || last_->first != key) {
      last_ = pending_.try_emplace(key).first;
      if (last_->second.values.empty() && !free_.empty()) {  // a closed step's buffers, no allocation
        last_->second = std::move(free_.back());
        free_.pop_back();
      }
    }
    Pending& p = last_->second;
    if (p.values.size() < static_cast<size_t>(world_)) {
      p.values.resize(world_, std::nan(""));
      p.reported.resize(world_, 0);
    }
    if (p.reported[rank]) return;
    p.reported[rank] = 1;
    ++p.n;
    if (std::isfinite(v) && v >= 0) p.values[rank] = v;
    if (std::isfinite(t)) p.t = std::isfinite(p.t) ? std::max(p.t, t) : t;
    if (p.n >= world_ && p.n >= 2) {
      judge(step, p.values.data(), p.values.size(), p.t);
      close(last_);
    }
    while (pending_.size() > kMaxPending) close(pending_.begin());
  }

  std::optional<Finding> finding() const override { return finding_; }

  CheckResult check() const override {
    if (finding_) return {cause(), CheckState::fail, finding_->evidence.empty() ? "" : finding_->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    // Without local_grad_norm, a log that names only rank 0 (most foreign logs) may still come from
    // many ranks: say what is missing rather than "single rank".
    if (!local_seen_)
      return {cause(), CheckState::cannot_run, "missing local_grad_norm: log each rank's grad norm before the all-reduce"};
    if (world_ == 1) return {cause(), CheckState::pass, "single rank: not applicable"};
    return {cause(), CheckState::pass,
            fmt::format("{} steps compared across {} ranks, no rank with zero gradients", judged_, world_)};
  }

 private:
  struct Pending {
    std::vector<double> values;
    std::vector<char> reported;
    int n = 0;
    double t = std::nan("");
  };
  using PendingMap = std::map<std::pair<int64_t, int64_t>, Pending>;

  void close(PendingMap::iterator it) {
    Pending& p = it->second;
    std::fill(p.values.begin(), p.values.end(), std::nan(""));
    std::fill(p.reported.begin(), p.reported.end(), 0);
    p.n = 0;
    p.t = std::nan("");
    free_.push_back(std::move(p));
    if (it == last_) last_ = pending_.end();
    pending_.erase(it);
  }
  struct Run {
    int n = 0;
    int64_t first = -1;
  };

  // A block in lockstep that is a whole step of every rank (the fleet simulator's), with nothing
  // pending and every rank at the same occurrence of the step: judged from its column. False when it is
  // not one (its rows go one by one then; the occurrences it counted are then counted again by row()
  // only for ranks whose count it did not take: it takes none unless it judges).
  bool whole_step(const StepBlock& b) {
    const size_t n = b.rows();
    const int w = static_cast<int>(n);
    if (!pending_.empty() || n < 2 || (cfg_world_ > 0 ? cfg_world_ != w : world_ > w)) return false;
    if (seen_.size() < n) seen_.resize(n), extends_.resize(n, kNever);
    const int64_t step = b.step[0];
    if (extend_all(n, step, extends_.data())) {
      // every rank's open run goes on to `step`: its first occurrence everywhere (occurrence() does the
      // same, one rank at a time)
      for (size_t r = 0; r < n; ++r) seen_[r].hi = step;
    } else {
      const int64_t occ = seen_[0].peek(step);
      for (size_t r = 1; r < n; ++r)
        if (seen_[r].peek(step) != occ) return false;
      for (size_t r = 0; r < n; ++r) count(r, step);
    }
    any_steps_ = true;
    world_ = w;
    values_.resize(n);
    if (column_values(n, b.local_grad_norm.data(), values_.data())) local_seen_ = true;
    judge(step, values_.data(), n, b.t_max);
    return true;
  }

  void judge(int64_t step, const double* values, size_t nv, double t) {
    ++judged_;
    if (finding_) return;  // sticky: nothing a later step does is reported
    const int w = static_cast<int>(nv);
    runs_.resize(w);
    // Fast path (most steps at fleet scale): no rank is near zero and no zero run is open, so the
    // per-rank judgement below would change nothing (a non-zero rank only resets a run).
    if (!near_zero(nv, values) && open_runs_ == 0) return;
    // Each rank against the others: median and max of the others from one sorted copy (the same
    // values median(others) would sort), O(W log W) per step instead of O(W^2 log W).
    sorted_.clear();
    for (size_t r = 0; r < nv; ++r)
      if (std::isfinite(values[r])) sorted_.push_back(values[r]);
    std::sort(sorted_.begin(), sorted_.end());
    const size_t n = sorted_.size();
    int fired = -1;
    double med_fired = 0;
    for (int r = 0; r < w; ++r) {
      const double v = values[r];
      if (!std::isfinite(v)) continue;
      if (n < 2) continue;  // no other rank reported a finite norm
      const size_t i = static_cast<size_t>(std::lower_bound(sorted_.begin(), sorted_.end(), v) - sorted_.begin());
      auto other = [&](size_t k) { return k < i ? sorted_[k] : sorted_[k + 1]; };
      const size_t m = n - 1;
      const double med = m % 2 ? other(m / 2) : (other(m / 2 - 1) + other(m / 2)) / 2;
      const double mx = i == n - 1 ? sorted_[n - 2] : sorted_[n - 1];
      if (!(med > 0)) continue;  // every other rank is zero too: not this cause
      if (v == 0 || v <= kZeroFrac * mx) {
        if (runs_[r].n++ == 0) {
          runs_[r].first = step;
          ++open_runs_;
        }
        if (runs_[r].n >= kZeroSteps && fired < 0) {
          fired = r;
          med_fired = med;
        }
      } else {
        if (runs_[r].n > 0) --open_runs_;
        runs_[r].n = 0;
      }
    }
    if (fired < 0 || finding_) return;
    Finding f;
    f.cause = cause();
    f.rank = fired;
    f.onset_step = runs_[fired].first;
    f.detected_step = step;
    f.detected_t = t;
    f.confidence = values[fired] == 0 ? 0.95 : 0.85;
    f.evidence.push_back(fmt::format("rank {} local grad norm {} at steps {}..{} while the other ranks' median is {}",
                                     fired, sci(values[fired]), runs_[fired].first, step, num(med_fired)));
    std::string all;
    for (int r = 0; r < w; ++r) all += fmt::format("{}rank {}: {}", r ? ", " : "", r, num(values[r]));
    f.evidence.push_back("local grad norms at step " + std::to_string(step) + ": " + all);
    finding_ = std::move(f);
  }

  int cfg_world_, world_ = 0;
  // How many times a rank reported a step before, without a map of every step: the rank's records
  // form runs of increasing steps (a restart or a repeated step starts a new run); a step was seen
  // once in every earlier run that covers it. Runs of one repeated step are merged (stale logging).
  struct Seen {
    struct Run {
      int64_t lo, hi, times;
    };
    std::vector<Run> closed;
    bool open = false;
    int64_t lo = 0, hi = 0;
    // What occurrence(step) would return, without counting it: a step that does not extend the open run
    // closes it first, and the closed runs then cover `step` once more if it lay in the open one.
    int64_t peek(int64_t step) const {
      int64_t n = !(open && step > hi) && open && lo <= step && step <= hi ? 1 : 0;
      for (const Run& c : closed)
        if (c.lo <= step && step <= c.hi) n += c.times;
      return n;
    }
    int64_t occurrence(int64_t step) {
      if (open && step > hi) {
        hi = step;
      } else {
        if (open) {
          if (!closed.empty() && lo == hi && closed.back().lo == lo && closed.back().hi == hi) ++closed.back().times;
          else closed.push_back({lo, hi, 1});
        }
        open = true;
        lo = hi = step;
      }
      int64_t n = 0;
      for (const Run& c : closed)
        if (c.lo <= step && step <= c.hi) n += c.times;
      return n;
    }
  };
  std::vector<Seen> seen_;                 // per rank
  // per rank: the open run's last step when it has no closed run before it (so that the next step of a
  // whole block can be checked for all ranks at once: extend_all), else kNever
  std::vector<int64_t> extends_;
  int64_t count(size_t r, int64_t step) {
    const int64_t occ = seen_[r].occurrence(step);
    extends_[r] = seen_[r].open && seen_[r].closed.empty() ? seen_[r].hi : kNever;
    return occ;
  }
  std::vector<double> sorted_, values_;    // scratch for judge(); a whole step's values
  int64_t open_runs_ = 0;                  // ranks with a zero run in progress
  PendingMap pending_;
  PendingMap::iterator last_ = pending_.end();  // the step records arrive for now
  std::vector<Pending> free_;                   // closed steps' buffers
  std::vector<Run> runs_;
  std::optional<Finding> finding_;
  int64_t judged_ = 0;
  bool any_steps_ = false, local_seen_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("zero_grad_rank", ZeroGradRank);

}  // namespace flatline
