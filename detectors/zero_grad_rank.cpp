// zero_grad_rank (DESIGN.md cause 5): one data-parallel rank sends zeros into the gradient all-reduce
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
#include <map>
#include <vector>

#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

constexpr double kZeroFrac = 1e-12;   // "zero" relative to the largest other rank
constexpr int kZeroSteps = 2;         // consecutive judged steps
constexpr size_t kMaxPending = 50000; // steps waiting for a missing rank, at most

class ZeroGradRank : public Detector {
 public:
  explicit ZeroGradRank(const DetectorConfig& c) : cfg_world_(c.world_size) {}
  const char* cause() const override { return "zero_grad_rank"; }

  void observe(const Record& r) override {
    if (r.kind != RecordKind::step || r.rank < 0) return;
    if (cfg_world_ > 0 && r.rank >= cfg_world_) return;
    any_steps_ = true;
    world_ = std::max(world_, cfg_world_ > 0 ? cfg_world_ : r.rank + 1);
    if (finite(r.local_grad_norm)) local_seen_ = true;
    const int64_t occ = occurrences_[r.rank][r.step]++;
    Pending& p = pending_[{r.step, occ}];
    if (p.values.size() < static_cast<size_t>(world_)) {
      p.values.resize(world_, std::nan(""));
      p.reported.resize(world_, false);
    }
    if (p.reported[r.rank]) return;
    p.reported[r.rank] = true;
    ++p.n;
    if (finite(r.local_grad_norm) && *r.local_grad_norm >= 0) p.values[r.rank] = *r.local_grad_norm;
    if (finite(r.t)) p.t = std::isfinite(p.t) ? std::max(p.t, r.t) : r.t;
    if (p.n >= world_ && p.n >= 2) {
      judge(r.step, p);
      pending_.erase({r.step, occ});
    }
    while (pending_.size() > kMaxPending) pending_.erase(pending_.begin());
  }

  std::optional<Finding> finding() const override { return finding_; }

  CheckResult check() const override {
    if (finding_) return {cause(), CheckState::fail, finding_->evidence.empty() ? "" : finding_->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    if (world_ == 1) return {cause(), CheckState::pass, "single rank: not applicable"};
    if (!local_seen_)
      return {cause(), CheckState::cannot_run, "missing local_grad_norm: log each rank's grad norm before the all-reduce"};
    return {cause(), CheckState::pass,
            fmt::format("{} steps compared across {} ranks, no rank with zero gradients", judged_, world_)};
  }

 private:
  struct Pending {
    std::vector<double> values;
    std::vector<bool> reported;
    int n = 0;
    double t = std::nan("");
  };
  struct Run {
    int n = 0;
    int64_t first = -1;
  };

  void judge(int64_t step, const Pending& p) {
    ++judged_;
    const int w = static_cast<int>(p.values.size());
    runs_.resize(w);
    int fired = -1;
    double med_fired = 0;
    std::vector<double> others;
    for (int r = 0; r < w; ++r) {
      const double v = p.values[r];
      if (!std::isfinite(v)) continue;
      others.clear();
      for (int o = 0; o < w; ++o)
        if (o != r && std::isfinite(p.values[o])) others.push_back(p.values[o]);
      if (others.empty()) continue;
      const double med = median(others), mx = *std::max_element(others.begin(), others.end());
      if (!(med > 0)) continue;  // every other rank is zero too: not this cause
      if (v == 0 || v <= kZeroFrac * mx) {
        if (runs_[r].n++ == 0) runs_[r].first = step;
        if (runs_[r].n >= kZeroSteps && fired < 0) {
          fired = r;
          med_fired = med;
        }
      } else {
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
  std::map<int, std::map<int64_t, int64_t>> occurrences_;  // rank -> step -> times reported
  std::map<std::pair<int64_t, int64_t>, Pending> pending_;
  std::vector<Run> runs_;
  std::optional<Finding> finding_;
  int64_t judged_ = 0;
  bool any_steps_ = false, local_seen_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("zero_grad_rank", ZeroGradRank);

}  // namespace flatline
