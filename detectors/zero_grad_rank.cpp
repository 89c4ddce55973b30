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

#include <map>
#include <vector>

#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace zero_grad_rank;  // its thresholds (detectors/zero_grad_rank.h)
constexpr size_t kMaxPending = 50000; // steps waiting for a missing rank, at most

class ZeroGradRank final : public BlockDetector<ZeroGradRank> {
 public:
  explicit ZeroGradRank(const DetectorConfig& c) : cfg_world_(c.world_size) {}
  const char* cause() const override { return "zero_grad_rank"; }

  void observe(const Record& r) override {
    if (r.kind != RecordKind::step || r.rank < 0) return;
    if (cfg_world_ > 0 && r.rank >= cfg_world_) return;
    any_steps_ = true;
    world_ = std::max(world_, cfg_world_ > 0 ? cfg_world_ : r.rank + 1);
    if (finite(r.local_grad_norm)) local_seen_ = true;
    if (static_cast<size_t>(r.rank) >= seen_.size()) seen_.resize(static_cast<size_t>(r.rank) + 1);
    const int64_t occ = seen_[static_cast<size_t>(r.rank)].occurrence(r.step);
    const std::pair<int64_t, int64_t> key{r.step, occ};
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
    if (p.reported[r.rank]) return;
    p.reported[r.rank] = 1;
    ++p.n;
    if (finite(r.local_grad_norm) && *r.local_grad_norm >= 0) p.values[r.rank] = *r.local_grad_norm;
    if (finite(r.t)) p.t = std::isfinite(p.t) ? std::max(p.t, r.t) : r.t;
    if (p.n >= world_ && p.n >= 2) {
      judge(r.step, p);
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

  void judge(int64_t step, const Pending& p) {
    ++judged_;
    if (finding_) return;  // sticky: nothing a later step does is reported
    const int w = static_cast<int>(p.values.size());
    runs_.resize(w);
    // Fast path (most steps at fleet scale): no rank is near zero and no zero run is open, so the
    // per-rank judgement below would change nothing (a non-zero rank only resets a run).
    sorted_.clear();
    for (double v : p.values)
      if (std::isfinite(v)) sorted_.push_back(v);
    if (sorted_.empty()) return;
    const double gmax = *std::max_element(sorted_.begin(), sorted_.end());
    bool any = open_runs_ > 0;
    for (double v : sorted_) any = any || v == 0 || v <= kZeroFrac * gmax;
    if (!any) return;
    // Each rank against the others: median and max of the others from one sorted copy (the same
    // values median(others) would sort), O(W log W) per step instead of O(W^2 log W).
    std::sort(sorted_.begin(), sorted_.end());
    const size_t n = sorted_.size();
    int fired = -1;
    double med_fired = 0;
    for (int r = 0; r < w; ++r) {
      const double v = p.values[r];
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
    f.detected_t = p.t;
    f.confidence = p.values[fired] == 0 ? 0.95 : 0.85;
    f.evidence.push_back(fmt::format("rank {} local grad norm {} at steps {}..{} while the other ranks' median is {}",
                                     fired, sci(p.values[fired]), runs_[fired].first, step, num(med_fired)));
    std::string all;
    for (int r = 0; r < w; ++r) all += fmt::format("{}rank {}: {}", r ? ", " : "", r, num(p.values[r]));
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
  std::vector<double> sorted_;             // scratch for judge()
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
