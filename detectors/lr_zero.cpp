// lr_zero (docs/DESIGN.md §2, cause 2): the learning rate has decayed to (near) zero.
//
// Signal: `lr` of each applied step (skipped != true); when lr is not logged, update_norm /
//   param_norm with grad_norm. Per rank (every rank logs the same lr; each is judged on its own).
// Window: the running peak lr of the rank, and the current streak of low-lr steps.
// Warm-up: a warmup starting at lr 0 is fine: while no lr > 0 has been seen, only a streak of 3
//   applied steps at lr <= 1e-12 fires (a healthy linear warmup is at 0 on its first step only).
// Thresholds:
//   lr < 1e-3 * peak on 2 consecutive distinct applied steps after the peak was reached. Strict <, not
//     <=, so that a cosine tail ending exactly at min_lr = 0.1% of peak stays healthy.
//   lr <= 1e-12 on 3 consecutive applied steps while the peak is still 0 (warmup stuck at lr 0).
//   fallback without lr: update_norm / param_norm < 1e-9 on 3 consecutive applied steps while
//     grad_norm > 0 (gradients exist but the parameters do not move).
//   onset_step = the first step of the low stretch; detected_step = the step that completed it.
// False-positive guards: warmup starting at lr 0 (above); a healthy cosine tail to min_lr >= 0.1% of
//   peak (never below the threshold); a schedule's planned end: when the log says where the run is
//   planned to end (DetectorConfig::planned_steps: HF Trainer's max_steps, Megatron's train_iters),
//   low lr in its last max(3, 3%) steps is the schedule finishing (a cosine or linear decay to 0 is
//   below 0.1% of peak only there), not a fault; in a complete recorded log without a planned end
//   (DetectorConfig::log_complete), low lr only in the log's own last max(3, 3%) steps is the same; fp16 skipped steps (not counted: no update was applied);
//   restarts re-emitting steps (the same step twice is not two steps of a streak).
// Cross-rank: candidates per rank, committed by RankGate on the ordinal of step records.
#include "detectors/lr_zero.h"

#include <map>

#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace lr_zero;  // its thresholds (detectors/lr_zero.h)

struct Streak {
  int n = 0;
  int64_t first = -1, last = -1;
  void reset() { n = 0; }
  // Counts `step` if it differs from the previous one; returns the new length.
  int add(int64_t step) {
    if (n == 0) { first = step; n = 1; }
    else if (step != last) ++n;
    last = step;
    return n;
  }
};

class LrZero final : public BlockDetector<LrZero> {
 public:
  explicit LrZero(const DetectorConfig& c)
      : gate_(c.world_size, /*exact_positions=*/true), planned_end_(c.planned_steps), log_complete_(c.log_complete) {}
  const char* cause() const override { return "lr_zero"; }

  void observe(const Record& r) override {
    if (r.kind != RecordKind::step || r.rank < 0) return;
    any_steps_ = true;
    Rank& s = ranks_[r.rank];
    ++s.ordinal;
    if (!r.skipped.value_or(false)) {
      if (finite(r.lr) && *r.lr >= 0) on_lr(r, s);
      else if (!r.lr) on_no_lr(r, s);
    }
    gate_.advance(r.rank, static_cast<double>(s.ordinal));
    gate_.poll();
  }
  void finish(double) override {
    gate_.flush();
    // A complete log whose planned end is not logged: low lr only in its last max(3, 3%) steps is the
    // schedule ending with the log (a cosine or linear decay to 0), not a fault: nothing trained at it.
    auto f = gate_.finding();
    if (!f || !log_complete_ || planned_end_ > 0) return;
    int64_t last = -1;
    for (const auto& [rank, s] : ranks_) last = std::max(last, s.last_step);
    const int64_t tail = std::max<int64_t>(kMinPlannedTail, static_cast<int64_t>(kPlannedTail * static_cast<double>(last)));
    if (f->onset_step >= last - tail) at_log_end_ = f;
  }
  std::optional<Finding> finding() const override {
    if (at_log_end_) return std::nullopt;
    return gate_.finding();
  }

  CheckResult check() const override {
    CheckResult c{cause(), CheckState::pending, ""};
    if (at_log_end_)
      return {cause(), CheckState::pass,
              fmt::format("lr below 0.1% of peak only in the log's last steps (from step {}): the schedule ending with "
                          "the log (its planned end is not logged)",
                          at_log_end_->onset_step)};
    if (auto f = gate_.finding()) return {cause(), CheckState::fail, f->evidence.empty() ? "" : f->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    for (const auto& [rank, s] : ranks_) {
      if (s.lr_seen) {
        c.state = CheckState::pass;
        c.detail = s.peak > 0 ? fmt::format("lr {} at step {} = {:.1f}% of peak {} (step {})", sci(s.last_lr),
                                            s.last_step, 100 * s.last_lr / s.peak, sci(s.peak), s.peak_step)
                              : fmt::format("lr {} at step {} (no lr > 0 yet)", sci(s.last_lr), s.last_step);
        return c;
      }
    }
    for (const auto& [rank, s] : ranks_) {
      if (s.ratio_seen) {
        c.state = CheckState::pass;
        c.detail = fmt::format("lr not logged; update/param {} at step {}", sci(s.last_ratio), s.last_step);
        return c;
      }
    }
    return {cause(), CheckState::cannot_run, "missing lr: log the learning rate per step"};
  }

 private:
  struct Rank {
    int64_t ordinal = 0, last_step = -1, peak_step = -1;
    double peak = 0, last_lr = 0, last_ratio = 0;
    bool lr_seen = false, ratio_seen = false;
    Streak low, zero, still;
  };

  void on_lr(const Record& r, Rank& s) {
    const double lr = *r.lr;
    s.lr_seen = true;
    s.last_lr = lr;
    s.last_step = r.step;
    if (lr > s.peak) {
      s.peak = lr;
      s.peak_step = r.step;
    }
    if (s.peak <= kZeroLr) {  // warmup has not left 0 yet
      if (s.zero.add(r.step) == kStuckWarmupSteps)
        fire(r, s, s.zero.first, 0.9,
             fmt::format("lr = 0 on the first {} applied steps ({}..{}): warmup never leaves 0", kStuckWarmupSteps,
                         s.zero.first, r.step));
      return;
    }
    if (lr < kLowFrac * s.peak && in_planned_tail(r.step)) {
      s.low.reset();  // the schedule ending where the run was planned to end
    } else if (lr < kLowFrac * s.peak) {
      if (s.low.add(r.step) == kLowSteps) {
        const std::string what = lr == 0 ? "lr = 0" : "lr = " + sci(lr) + " (< 0.1% of peak)";
        fire(r, s, s.low.first, lr == 0 ? 0.95 : 0.85,
             fmt::format("{} since step {} (peak {} at step {})", what, s.low.first, sci(s.peak), s.peak_step));
      }
    } else {
      s.low.reset();
    }
  }

  void on_no_lr(const Record& r, Rank& s) {
    if (!finite(r.update_norm) || !finite(r.param_norm) || *r.param_norm <= 0) return;
    const double ratio = *r.update_norm / *r.param_norm;
    s.ratio_seen = true;
    s.last_ratio = ratio;
    s.last_step = r.step;
    if (!finite(r.grad_norm) || *r.grad_norm <= 0) return;  // no gradient: a still model proves nothing
    if (ratio < kStillRatio) {
      if (s.still.add(r.step) == kStillSteps)
        fire(r, s, s.still.first, 0.7,
             fmt::format("update/param = {} since step {} while grad_norm = {} (lr not logged)", sci(ratio),
                         s.still.first, num(*r.grad_norm)));
    } else {
      s.still.reset();
    }
  }

  bool in_planned_tail(int64_t step) const {
    if (planned_end_ <= 0) return false;
    const int64_t tail = std::max<int64_t>(kMinPlannedTail, static_cast<int64_t>(kPlannedTail * planned_end_));
    return step >= planned_end_ - tail;
  }

  void fire(const Record& r, const Rank& s, int64_t onset, double confidence, std::string evidence) {
    gate_.offer(r.rank, static_cast<double>(s.ordinal),
                Finding{cause(), -1, onset, r.step, r.t, confidence, {std::move(evidence)}});
  }

  PerRank<Rank> ranks_;
  RankGate gate_;
  bool any_steps_ = false;
  int64_t planned_end_ = 0;
  bool log_complete_ = false;
  std::optional<Finding> at_log_end_;  // the finding, withdrawn at finish (above)
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("lr_zero", LrZero);

}  // namespace flatline
