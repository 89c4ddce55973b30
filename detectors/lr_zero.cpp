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

#include <algorithm>
#include <limits>

#include "detectors/gated_ranks.h"
#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace lr_zero;  // its thresholds (detectors/lr_zero.h)

// A run of consecutive distinct steps: its length n (kept apart, in an array), first and last step.
struct Streak {
  int64_t first = -1, last = -1;
  // Counts `step` if it differs from the previous one; returns the new length.
  int64_t add(int64_t& n, int64_t step) {
    if (n == 0) {
      first = step;
      n = 1;
    } else if (step != last) {
      ++n;
    }
    last = step;
    return n;
  }
};

// The plain rows of a block in lockstep (row i = rank i): an applied step whose lr is finite, >= 0 and at
// or above 0.1% of a peak above 0 only moves the running state (peak, last lr, the low streak back to
// 0). Branch-free over 64-bit columns, so that it vectorises (kept out of line: once inlined, GCC 12 no
// longer vectorises it). odd[i] = 1 for a row the rules must see in full; returns how many.
__attribute__((noinline)) size_t plain_rows(size_t n, const double* __restrict lr, const uint64_t* __restrict flags,
                                            const int64_t* __restrict step,
                                            double* __restrict peak, double* __restrict last_lr,
                                            int64_t* __restrict peak_step, int64_t* __restrict last_step,
                                            int64_t* __restrict seen, int64_t* __restrict low_n,
                                            int64_t* __restrict odd) {
  size_t n_odd = 0;
  for (size_t i = 0; i < n; ++i) {
    const double l = lr[i], p0 = peak[i], pk = p0 > l ? p0 : l;
    int64_t plain = (flags[i] & (StepBlock::kLr | StepBlock::kSkippedValue)) == StepBlock::kLr;  // logged, applied
    plain &= l >= 0;
    plain &= l < std::numeric_limits<double>::infinity();
    plain &= pk > kZeroLr;
    plain &= !(l < kLowFrac * pk);
    odd[i] = 1 - plain;
    n_odd += static_cast<size_t>(1 - plain);
    peak_step[i] = (plain & (l > p0)) != 0 ? step[i] : peak_step[i];
    peak[i] = plain != 0 ? pk : p0;
    last_lr[i] = plain != 0 ? l : last_lr[i];
    last_step[i] = plain != 0 ? step[i] : last_step[i];
    seen[i] |= plain;
    low_n[i] = plain != 0 ? 0 : low_n[i];
  }
  return n_odd;
}

class LrZero final : public BlockDetector {
 public:
  explicit LrZero(const DetectorConfig& c)
      : seen_(c.world_size, /*exact_positions=*/true), planned_end_(c.planned_steps), log_complete_(c.log_complete) {}
  const char* cause() const override { return "lr_zero"; }

  void observe_event(const Record&) override {}  // events and evals say nothing about the lr

  // One pass over the block's step rows: in a block in lockstep the plain rows in one vectorised loop
  // (plain_rows) and the others through row(), the rules in full; else every row through row().
  void observe_block(const StepBlock& b) override {
    const auto grow_to = [this](size_t k) { grow(k); };
    if (!seen_.start(b, grow_to)) return;
    const size_t odd = b.lockstep ? plain_rows(b.rows(), b.lr.data(), b.flags.data(), b.step.data(), peak_.data(),
                                               last_lr_.data(), peak_step_.data(), last_step_.data(), lr_seen_.data(),
                                               low_n_.data(), seen_.odd.data())
                                  : 0;
    seen_.finish_pass(b, odd, grow_to, [&](size_t i, int r, double ord) { row(b, i, r, ord); });
  }
  void finish(double) override {
    seen_.gate.flush();
    // A complete log whose planned end is not logged: low lr only in its last max(3, 3%) steps is the
    // schedule ending with the log (a cosine or linear decay to 0), not a fault: nothing trained at it.
    auto f = seen_.gate.finding();
    if (!f || !log_complete_ || planned_end_ > 0) return;
    int64_t last = -1;
    for (size_t r = 0; r < seen_.present.size(); ++r)
      if (seen_.present[r]) last = std::max(last, last_step_[r]);
    const int64_t tail = std::max<int64_t>(kMinPlannedTail, static_cast<int64_t>(kPlannedTail * static_cast<double>(last)));
    if (f->onset_step >= last - tail) at_log_end_ = f;
  }
  std::optional<Finding> finding() const override {
    if (at_log_end_) return std::nullopt;
    return seen_.gate.finding();
  }

  CheckResult check() const override {
    CheckResult c{cause(), CheckState::pending, ""};
    if (at_log_end_)
      return {cause(), CheckState::pass,
              fmt::format("lr below 0.1% of peak only in the log's last steps (from step {}): the schedule ending with "
                          "the log (its planned end is not logged)",
                          at_log_end_->onset_step)};
    if (auto settled = seen_.check(cause())) return *settled;
    for (size_t r = 0; r < seen_.present.size(); ++r) {
      if (seen_.present[r] && lr_seen_[r]) {
        c.state = CheckState::pass;
        c.detail = peak_[r] > 0 ? fmt::format("lr {} at step {} = {:.1f}% of peak {} (step {})", sci(last_lr_[r]),
                                              last_step_[r], 100 * last_lr_[r] / peak_[r], sci(peak_[r]), peak_step_[r])
                                : fmt::format("lr {} at step {} (no lr > 0 yet)", sci(last_lr_[r]), last_step_[r]);
        return c;
      }
    }
    for (size_t r = 0; r < seen_.present.size(); ++r) {
      if (seen_.present[r] && rare_[r].ratio_seen) {
        c.state = CheckState::pass;
        c.detail = fmt::format("lr not logged; update/param {} at step {}", sci(rare_[r].last_ratio), last_step_[r]);
        return c;
      }
    }
    return {cause(), CheckState::cannot_run, "missing lr: log the learning rate per step"};
  }

 private:
  struct Rare {  // what only the rules in full read
    Streak low, zero, still;
    int64_t zero_n = 0, still_n = 0;
    double last_ratio = 0;
    bool ratio_seen = false;
  };

  void grow(size_t n) {
    if (seen_.present.size() >= n) return;
    seen_.present.resize(n, 0), peak_.resize(n, 0), last_lr_.resize(n, 0), peak_step_.resize(n, -1);
    last_step_.resize(n, -1), lr_seen_.resize(n, 0), low_n_.resize(n, 0), rare_.resize(n);
  }

  // Row i of rank r, its ordinal `ord`: the rules in full.
  void row(const StepBlock& b, size_t i, int r, double ord) {
    if (b.skipped(i)) return;  // no update was applied
    const bool has_lr = (b.flags[i] & StepBlock::kLr) != 0;
    if (has_lr && std::isfinite(b.lr[i]) && b.lr[i] >= 0) on_lr(b, i, r, ord);
    else if (!has_lr) on_no_lr(b, i, r, ord);
  }

  void on_lr(const StepBlock& b, size_t i, int r, double ord) {
    const size_t k = static_cast<size_t>(r);
    const double lr = b.lr[i];
    const int64_t step = b.step[i];
    Rare& x = rare_[k];
    lr_seen_[k] = 1;
    last_lr_[k] = lr;
    last_step_[k] = step;
    if (lr > peak_[k]) {
      peak_[k] = lr;
      peak_step_[k] = step;
    }
    if (peak_[k] <= kZeroLr) {  // warmup has not left 0 yet
      if (x.zero.add(x.zero_n, step) == kStuckWarmupSteps)
        fire(b, i, r, ord, x.zero.first, 0.9,
             fmt::format("lr = 0 on the first {} applied steps ({}..{}): warmup never leaves 0", kStuckWarmupSteps,
                         x.zero.first, step));
      return;
    }
    if (lr < kLowFrac * peak_[k] && in_planned_tail(step)) {
      low_n_[k] = 0;  // the schedule ending where the run was planned to end
    } else if (lr < kLowFrac * peak_[k]) {
      if (x.low.add(low_n_[k], step) == kLowSteps) {
        const std::string what = lr == 0 ? "lr = 0" : "lr = " + sci(lr) + " (< 0.1% of peak)";
        fire(b, i, r, ord, x.low.first, lr == 0 ? 0.95 : 0.85,
             fmt::format("{} since step {} (peak {} at step {})", what, x.low.first, sci(peak_[k]), peak_step_[k]));
      }
    } else {
      low_n_[k] = 0;
    }
  }

  void on_no_lr(const StepBlock& b, size_t i, int r, double ord) {
    const size_t k = static_cast<size_t>(r);
    const double un = b.update_norm[i], pn = b.param_norm[i], gn = b.grad_norm[i];  // NaN when absent
    if (!std::isfinite(un) || !std::isfinite(pn) || pn <= 0) return;
    Rare& x = rare_[k];
    const double ratio = un / pn;
    x.ratio_seen = true;
    x.last_ratio = ratio;
    last_step_[k] = b.step[i];
    if (!std::isfinite(gn) || gn <= 0) return;  // no gradient: a still model proves nothing
    if (ratio < kStillRatio) {
      if (x.still.add(x.still_n, b.step[i]) == kStillSteps)
        fire(b, i, r, ord, x.still.first, 0.7,
             fmt::format("update/param = {} since step {} while grad_norm = {} (lr not logged)", sci(ratio),
                         x.still.first, num(gn)));
    } else {
      x.still_n = 0;
    }
  }

  bool in_planned_tail(int64_t step) const {
    if (planned_end_ <= 0) return false;
    const int64_t tail = std::max<int64_t>(kMinPlannedTail, static_cast<int64_t>(kPlannedTail * planned_end_));
    return step >= planned_end_ - tail;
  }

  void fire(const StepBlock& b, size_t i, int r, double ord, int64_t onset, double confidence, std::string evidence) {
    seen_.gate.offer(r, ord, Finding{cause(), -1, onset, b.step[i], b.t[i], confidence, {std::move(evidence)}});
  }

  // per rank
  // per rank (64-bit wide, so that the pass over a block in lockstep vectorises)
  std::vector<double> peak_, last_lr_;
  std::vector<int64_t> peak_step_, last_step_, lr_seen_, low_n_;
  std::vector<Rare> rare_;
  GatedRanks seen_;  // present ranks, the gate, the block's odd rows (detectors/gated_ranks.h)
  int64_t planned_end_ = 0;
  bool log_complete_ = false;
  std::optional<Finding> at_log_end_;  // the finding, withdrawn at finish (above)
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("lr_zero", LrZero);

}  // namespace flatline
