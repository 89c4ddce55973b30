// straggler (a fleet finding, not one of the five checklist causes): one rank computes slower than
// the others, and because the gradient all-reduce waits for the slowest rank every rank's step time
// follows it. Triage reports it after the checklist; it is the diagnosis only when no checklist cause
// fired (a slow run whose loss is fine).
//
// Signal: per step record, compute = step_ms - comm_ms (the time outside the all-reduce) and comm_ms,
//   of every rank at the same step (keyed by the k-th step record of each rank, as RankGate does).
// Window: the current run of consecutive judged steps at which the same rank was the slow one.
// Warm-up: none beyond needing 3 ranks (with 2, "the others" is one rank: the median means nothing).
// Thresholds:
//   a rank is slow at a step when its compute > (1 + k) x the median compute of the others, k = 0.15
//   (healthy per-rank jitter is a few %; the slowest of 1024 healthy ranks is ~+3.5 sigma), AND the
//   others absorb the difference: their median comm_ms exceeds the rank's comm_ms by at least half
//   the compute gap (they waited for it inside the all-reduce).
//   fire when the same rank is slow on 10 consecutive judged steps (with 3, ranks time-sliced on
//   fewer cores than ranks were named on a few steps of scheduler jitter). rank = that rank, onset_step = the
//   first of them, detected_t = the latest t among the ranks' records of that step.
// False-positive guards: a rank that is slow for a few steps (a GC pause, a page fault, the OS
//   scheduler time-slicing more ranks than cores); every rank slow
//   together (a checkpoint step: the median moves with them); a rank with a short step because it
//   skipped its backward (faster, not slower); missing comm_ms (cannot tell waiting from working:
//   cannot run).
#include "detectors/straggler.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <vector>

#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace straggler;  // its thresholds (detectors/straggler.h)
constexpr size_t kMaxPending = 4096; // steps waiting for a missing rank, at most

class Straggler final : public BlockDetector<Straggler> {
 public:
  explicit Straggler(const DetectorConfig& c) : cfg_world_(c.world_size) {}
  const char* cause() const override { return "straggler"; }

  void observe(const Record& r) override {
    if (r.kind != RecordKind::step || r.rank < 0 || finding_) return;
    if (cfg_world_ > 0 && r.rank >= cfg_world_) return;
    any_steps_ = true;
    world_ = std::max(world_, cfg_world_ > 0 ? cfg_world_ : r.rank + 1);
    if (static_cast<size_t>(r.rank) >= ordinal_.size()) ordinal_.resize(static_cast<size_t>(r.rank) + 1, 0);
    const int64_t k = ordinal_[static_cast<size_t>(r.rank)]++;
    if (k < base_) return;  // already judged (or dropped)
    while (static_cast<int64_t>(pending_.size()) <= k - base_) open_step();
    Pending& p = pending_[static_cast<size_t>(k - base_)];
    if (p.compute.size() < static_cast<size_t>(world_)) {
      p.compute.resize(world_, std::nan(""));
      p.comm.resize(world_, std::nan(""));
    }
    if (finite(r.comm_ms)) comm_seen_ = true;
    if (finite(r.step_ms) && finite(r.comm_ms)) {
      p.compute[r.rank] = *r.step_ms - *r.comm_ms;
      p.comm[r.rank] = *r.comm_ms;
    }
    p.step = r.step;
    if (finite(r.t)) p.t = std::isfinite(p.t) ? std::max(p.t, r.t) : r.t;
    ++p.n;
    while (!pending_.empty() && pending_.front().n >= world_ && world_ >= 2) {
      judge(pending_.front());
      close_step();
    }
    while (pending_.size() > kMaxPending) close_step();
  }

  std::optional<Finding> finding() const override { return finding_; }

  CheckResult check() const override {
    if (finding_) return {cause(), CheckState::fail, finding_->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    if (world_ < 3) return {cause(), CheckState::pass, "fewer than 3 ranks: not applicable"};
    if (!comm_seen_)
      return {cause(), CheckState::cannot_run, "missing comm_ms: log the time each rank spends in the all-reduce"};
    return {cause(), CheckState::pass,
            fmt::format("{} steps compared across {} ranks, slowest compute at most {:.0f}% above the median",
                        judged_, world_, 100 * worst_)};
  }

 private:
  struct Pending {
    std::vector<double> compute, comm;
    int n = 0;
    int64_t step = 0;
    double t = std::nan("");
  };

  // A step's buffers are reused from a closed step's: no allocation per step at fleet scale.
  void open_step() {
    if (free_.empty()) {
      pending_.emplace_back();
      return;
    }
    pending_.push_back(std::move(free_.back()));
    free_.pop_back();
    Pending& p = pending_.back();
    std::fill(p.compute.begin(), p.compute.end(), std::nan(""));
    std::fill(p.comm.begin(), p.comm.end(), std::nan(""));
    p.n = 0;
    p.step = 0;
    p.t = std::nan("");
  }
  void close_step() {
    free_.push_back(std::move(pending_.front()));
    pending_.pop_front();
    ++base_;
  }

  void judge(const Pending& p) {
    // the slowest rank against the median of the others
    int slow = -1;
    for (int r = 0; r < static_cast<int>(p.compute.size()); ++r)
      if (std::isfinite(p.compute[r]) && (slow < 0 || p.compute[r] > p.compute[slow])) slow = r;
    if (slow < 0) return;
    scratch_.clear();
    comm_scratch_.clear();
    for (int r = 0; r < static_cast<int>(p.compute.size()); ++r)
      if (r != slow && std::isfinite(p.compute[r])) {
        scratch_.push_back(p.compute[r]);
        comm_scratch_.push_back(p.comm[r]);
      }
    if (scratch_.size() < 2) return;
    ++judged_;
    const double med = median_in_place(scratch_), med_comm = median_in_place(comm_scratch_);
    if (!(med > 0)) return;
    const double gap = p.compute[slow] - med;
    worst_ = std::max(worst_, gap / med);
    const bool is_slow = gap > kSlowFrac * med && med_comm - p.comm[slow] >= kAbsorbed * gap;
    if (!is_slow || slow != run_rank_) {
      run_rank_ = is_slow ? slow : -1;
      run_n_ = is_slow ? 1 : 0;
      run_first_ = p.step;
      if (!is_slow) return;
    } else {
      ++run_n_;
    }
    if (run_n_ < kSlowSteps) return;
    Finding f;
    f.cause = cause();
    f.rank = slow;
    f.onset_step = run_first_;
    f.detected_step = p.step;
    f.detected_t = p.t;
    f.confidence = 0.9;
    f.evidence.push_back(fmt::format("rank {} computes {:.0f} ms per step vs a median of {:.0f} ms for the other {} "
                                     "ranks (+{:.0f}%) on steps {}..{}",
                                     slow, p.compute[slow], med, scratch_.size(), 100 * gap / med, run_first_, p.step));
    f.evidence.push_back(fmt::format("the others wait for it in the all-reduce: median comm_ms {:.0f} vs {:.0f} on rank {}",
                                     med_comm, p.comm[slow], slow));
    finding_ = std::move(f);
  }

  int cfg_world_, world_ = 0;
  std::vector<int64_t> ordinal_;  // step records seen per rank
  std::deque<Pending> pending_;   // ordinals base_, base_ + 1, ...
  std::vector<Pending> free_;     // closed steps' buffers
  int64_t base_ = 0, judged_ = 0;
  std::vector<double> scratch_, comm_scratch_;
  int run_rank_ = -1, run_n_ = 0;
  int64_t run_first_ = -1;
  double worst_ = 0;
  std::optional<Finding> finding_;
  bool any_steps_ = false, comm_seen_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("straggler", Straggler);

}  // namespace flatline
