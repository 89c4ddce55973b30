// loss_scale_collapse (docs/DESIGN.md §2, cause 4): the fp16 dynamic loss scaler collapsed: repeated overflow
// halved it to tiny values, gradients underflow to 0, steps are skipped.
//
// Signal: loss_scale, overflow, skipped, grad_zero_frac, grad_norm of each step record, per rank.
// Window: the current streak of consecutive skipped/overflow steps, and the current stretch of
//   steps with loss_scale < 1.
// Warm-up: the scaler's initial search (overflows before the first applied step, halving from 2^16
//   until the scale fits) is healthy unless it lasts more than 30 steps or takes the scale below 1.
// Thresholds:
//   (a) a streak of >= 3 consecutive skipped/overflow steps that starts after the first applied
//       step, of which >= 2 are unexplained by the scale: scale x (grad_norm of the last applied step)
//       < 65504 / 2 (fp16's largest finite value, with a 2x margin because activation gradients can
//       exceed the parameter-gradient norm). A healthy scaler overflows because the scale is too
//       high for the gradients (scale x grad_norm far above 65504) and is clean again after a few
//       halvings; an inf that keeps coming back at a scale the gradients fit in is a broken layer or
//       a diverged loss, and the scaler will halve itself to nothing. Without a grad_norm to judge
//       by, a streak of >= 10 fires (the scale fell 1024x).
//   (b) loss_scale < 1 with grad_zero_frac > 0.5 or grad_norm == 0 on 2 consecutive steps: the
//       scale is clamped low and the fp16 gradients underflow to zero.
//   onset_step = the first step of the streak (a) / of the low-scale stretch (b).
//   fp32/bf16 runs (loss_scale absent or always 1, and no overflow) pass as "not fp16".
// False-positive guards: the initial scale search (above); a single overflow after a growth step;
//   the re-search when gradients grow during warmup (a streak of 6 from a scale of 2^22, seen with
//   Megatron's 2^32 initial scale: every overflow explained by scale x grad_norm); fp32 runs.
// Cross-rank: candidates per rank, committed by RankGate on the ordinal of step records.
#include <map>

#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

constexpr int kSkipStreak = 3;         // consecutive skipped steps after the first applied one
constexpr int kUnexplained = 2;        // of which overflowed at a scale the gradients fit in
constexpr double kFp16Max = 65504.0;   // largest finite IEEE binary16 value
constexpr int kBlindStreak = 10;       // streak that fires when no grad_norm tells explained from not
constexpr int kInitialSearchMax = 30;  // longest healthy initial scale search
constexpr double kLowScale = 1.0;      // a scale below this multiplies gradients down
constexpr double kZeroFrac = 0.5;      // grad_zero_frac that means underflow
constexpr int kLowSteps = 2;           // consecutive low-scale + underflow steps

class LossScaleCollapse final : public Detector {
 public:
  explicit LossScaleCollapse(const DetectorConfig& c) : gate_(c.world_size, /*exact_positions=*/true) {}
  const char* cause() const override { return "loss_scale_collapse"; }

  // The triage's blocks without a virtual call per record.
  void observe_block(const Record* rs, size_t n) override {
    for (size_t i = 0; i < n; ++i) LossScaleCollapse::observe(rs[i]);
  }
  void observe(const Record& r) override {
    if (r.kind != RecordKind::step || r.rank < 0) return;
    any_steps_ = true;
    Rank& s = ranks_[r.rank];
    ++s.ordinal;
    on_step(r, s);
    gate_.advance(r.rank, static_cast<double>(s.ordinal));
    gate_.poll();
  }
  void finish(double) override { gate_.flush(); }
  std::optional<Finding> finding() const override { return gate_.finding(); }

  CheckResult check() const override {
    if (auto f = gate_.finding()) return {cause(), CheckState::fail, f->evidence.empty() ? "" : f->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    for (const auto& [rank, s] : ranks_) {
      if (!s.fp16) continue;
      return {cause(), CheckState::pass,
              fmt::format("fp16: loss scale {} at step {}; {} skipped step(s), initial scale search {} step(s)",
                          scale(s.scale), s.last_step, s.skipped_total, s.initial_search)};
    }
    bool scale_logged = false;
    for (const auto& [rank, s] : ranks_) scale_logged |= s.scale_logged;
    return {cause(), CheckState::pass, scale_logged ? "not fp16 (loss scale 1, no overflow)"
                                                    : "not fp16 (no loss_scale or overflow logged)"};
  }

 private:
  struct Rank {
    int64_t ordinal = 0, last_step = -1, skipped_total = 0, initial_search = 0;
    bool fp16 = false, scale_logged = false, applied_seen = false;
    double scale = 1;
    // (a) skip streak
    int streak = 0, unexplained = 0;
    double last_grad_norm = -1;  // of the last applied step (unscaled); -1: unknown
    int64_t streak_first = -1;
    double streak_scale0 = 1;
    bool streak_initial = false;
    // (b) low scale
    int64_t low_first = -1;
    double low_scale0 = 1;
    int underflow = 0;
  };

  void on_step(const Record& r, Rank& s) {
    s.last_step = r.step;
    const double prev_scale = s.scale;
    if (finite(r.loss_scale)) {
      s.scale_logged = true;
      s.scale = *r.loss_scale;
      if (s.scale != 1) s.fp16 = true;
    }
    const bool overflow = r.overflow.value_or(r.skipped.value_or(false));
    const bool bad = overflow || r.skipped.value_or(false);
    if (overflow) s.fp16 = true;
    // for the evidence only: formatted when it fires, not on every step
    auto zero = [&r] {
      return finite(r.grad_zero_frac) && *r.grad_zero_frac >= 0.01
                 ? fmt::format(", {:.0f}% of grads zero", 100 * *r.grad_zero_frac)
                 : std::string();
    };
    // --- (a) a streak of skipped steps
    if (bad) {
      ++s.skipped_total;
      if (s.streak++ == 0) {
        s.streak_first = r.step;
        s.streak_scale0 = finite(r.loss_scale) ? *r.loss_scale : prev_scale;
        s.streak_initial = !s.applied_seen;
        s.unexplained = 0;
      }
      const double used = finite(r.loss_scale) ? *r.loss_scale : s.scale;
      if (s.last_grad_norm >= 0 && used * s.last_grad_norm < kFp16Max / 2) ++s.unexplained;
      if (s.streak_initial) s.initial_search = s.streak;
      const bool judged = s.last_grad_norm >= 0;
      const bool fires = s.streak_initial
                             ? (s.streak > kInitialSearchMax || s.scale < kLowScale)
                             : (judged ? s.streak >= kSkipStreak && s.unexplained >= kUnexplained
                                       : s.streak >= kBlindStreak);
      if (fires && s.fp16) {
        std::vector<std::string> ev{
            fmt::format("loss scale {} -> {} over steps {}..{}, {} steps skipped{}{}", scale(s.streak_scale0),
                        scale(s.scale), s.streak_first, r.step, s.streak, zero(),
                        s.streak_initial ? " (initial scale search never ends)" : "")};
        if (!s.streak_initial && judged)
          ev.push_back(fmt::format("{} overflow(s) at scale x grad_norm ({} x {}) below half the fp16 max: not the "
                                   "scale, an inf in the model",
                                   s.unexplained, scale(used), num(s.last_grad_norm)));
        fire(r, s, s.streak_first, 0.85, std::move(ev));
      }
    } else {
      s.streak = 0;
      s.applied_seen = true;
      if (finite(r.grad_norm)) s.last_grad_norm = *r.grad_norm;
    }
    // --- (b) scale below 1 and the gradients underflow
    if (finite(r.loss_scale) && *r.loss_scale < kLowScale) {
      if (s.low_first < 0) {
        s.low_first = r.step;
        s.low_scale0 = prev_scale;
      }
      const bool under = (finite(r.grad_zero_frac) && *r.grad_zero_frac > kZeroFrac) ||
                         (finite(r.grad_norm) && *r.grad_norm == 0);
      s.underflow = under ? s.underflow + 1 : 0;
      if (s.underflow >= kLowSteps && s.fp16)
        fire(r, s, s.low_first, 0.9,
             {fmt::format("loss scale {} -> {} since step {}; gradients underflow{}{}", scale(s.low_scale0),
                         scale(*r.loss_scale), s.low_first, zero(),
                         finite(r.grad_norm) ? ", grad_norm " + num(*r.grad_norm) : "")});
    } else if (finite(r.loss_scale)) {
      s.low_first = -1;
      s.underflow = 0;
    }
  }

  void fire(const Record& r, const Rank& s, int64_t onset, double confidence, std::vector<std::string> evidence) {
    gate_.offer(r.rank, static_cast<double>(s.ordinal),
                Finding{cause(), -1, onset, r.step, r.t, confidence, std::move(evidence)});
  }

  PerRank<Rank> ranks_;
  RankGate gate_;
  bool any_steps_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("loss_scale_collapse", LossScaleCollapse);

}  // namespace flatline
