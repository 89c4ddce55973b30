// loss_scale_collapse (docs/DESIGN.md §2, cause 4): the fp16 dynamic loss scaler collapsed: repeated overflow
// halved it to tiny values, gradients underflow to 0, steps are skipped.
//
// Signal: loss_scale, overflow, skipped, grad_zero_frac, grad_norm of each step record, per rank.
// Window: the current streak of consecutive skipped/overflow steps, and the current stretch of
//   steps with loss_scale < 1.
// Warm-up: the scaler's initial search (overflows before the first applied step, halving from 2^16
//   until the scale fits) is healthy while it lasts at most 30 steps and the scale stays far above
//   its floor (>= 16, four halvings above it: a search that gets lower means gradients near fp16's
//   limit already, and at the floor the scaler has nothing left to try).
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
//   (c) a scaler at its floor that keeps overflowing: 3 overflows in a row whose scale did not fall
//       (<= 1, DeepSpeed's and Megatron's default min_loss_scale, or the same attempted scale again:
//       DeepSpeed's "reducing to" the same value at a configured minimum; hysteresis holds the scale
//       for at most one overflow), initial search or not: the scaler can do nothing more. onset =
//       the first step of the streak that brought it there.
//   (d) DeepSpeed's "Current loss scale already at minimum - cannot decrease scale anymore" error
//       (an `error` event): the run is exiting for it.
//   (e) a scale that falls without an overflow (the record says overflow = false, the step advanced)
//       to below 1: something clamps the scaler (a max/override); onset = that step.
//   (f) a scale below 1 on 2 consecutive records with grad_zero_frac >= 0.05 above its level on the
//       last record at scale >= 1: the scale is low and the fp16 gradients underflow (a rising
//       fraction of exact zeros, well short of (b)'s 50%).
//   (g) without overflow flags (TensorBoard logs the scale alone): a scale below 1 that fell on 2
//       consecutive records: only a scaler backing off overflow after overflow gets there; onset =
//       the first record of that decline.
//   (h) the optimizer's own count (opt_step, the updates applied; DeepSpeed's step - skipped): of the
//       steps between two records that carry it, >= 20% skipped and >= 10 of them beyond the run's
//       first 30 (the initial search, however many records it spans). A healthy scaler skips about
//       one step per growth window (1000 steps by default in DeepSpeed and Megatron, 2000 in
//       GradScaler); a fifth of the updates
//       lost is a scaler that cannot find a scale, at any log density: a sparse log that prints the
//       counter every few thousand steps shows it as surely as a dense one. onset = the first of the
//       skipped steps if they all came last (the collapse is where the run ends up).
//   onset_step = the first step of the streak (a, c) / of the low-scale stretch (b, f).
//   fp32/bf16 runs (loss_scale always 1, or absent with overflow/skipped flags logged and never set)
//   pass as "not fp16"; bf16's "loss scale: 1.0" never overflows, so (c) cannot fire on it. A log
//   with neither the scale nor the flags (an HF trainer_state.json) cannot run: nothing says fp16.
// False-positive guards: the initial scale search (above); a single overflow after a growth step;
//   the re-search when gradients grow during warmup (a streak of 6 from a scale of 2^22, seen with
//   Megatron's 2^32 initial scale: every overflow explained by scale x grad_norm); fp32 runs.
// Cross-rank: candidates per rank, committed by RankGate on the ordinal of step records.
#include "detectors/loss_scale_collapse.h"

#include <map>

#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace loss_scale_collapse;  // its thresholds (detectors/loss_scale_collapse.h)

class LossScaleCollapse final : public BlockDetector<LossScaleCollapse> {
 public:
  explicit LossScaleCollapse(const DetectorConfig& c) : gate_(c.world_size, /*exact_positions=*/true) {}
  const char* cause() const override { return "loss_scale_collapse"; }

  void observe(const Record& r) override {
    if (r.kind == RecordKind::event && r.rank >= 0 && r.name == "error" && min_scale_error(r.detail)) {
      Rank& s = ranks_[r.rank];
      s.fp16 = true;
      fire(r, s, s.streak > 0 ? s.streak_first : r.step, 0.95,
           {fmt::format("the loss scaler reached its minimum and the run exits: \"{}\"", r.detail)});
      gate_.poll();
      return;
    }
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
    bool scale_logged = false, flags_logged = false;
    for (const auto& [rank, s] : ranks_) scale_logged |= s.scale_logged, flags_logged |= s.flags_logged;
    // Nothing logged of the scaler (an HF trainer_state.json): whether it is fp16 is not known, so the
    // check has not run; a pass would claim what no record says.
    if (!scale_logged && !flags_logged)
      return {cause(), CheckState::cannot_run,
              "missing loss_scale: log the loss scale (GradScaler.get_scale()) and skipped/overflow steps"};
    return {cause(), CheckState::pass,
            scale_logged ? "not fp16 (loss scale 1, no overflow)" : "not fp16 (no overflow; loss_scale not logged)"};
  }

 private:
  struct Rank {
    int64_t ordinal = 0, last_step = -1, skipped_total = 0, initial_search = 0;
    bool fp16 = false, scale_logged = false, flags_logged = false, applied_seen = false;
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
    // (c) overflows at the floor
    int floor_n = 0;
    int64_t floor_first = -1;
    double floor_scale = 0;
    // (e)-(g)
    int64_t prev_step = -1;
    std::optional<double> prev_scale;
    double zero_base = -1;  // grad_zero_frac on the last record at scale >= 1
    int rising = 0, falls = 0;
    int64_t fall_first = -1;
    double fall_scale0 = 1;
    // (h) the last record with an opt_step
    int64_t count_step = -1, count_opt = -1;
  };

  static bool min_scale_error(std::string_view d) {
    return d.find("loss scale already at minimum") != std::string_view::npos ||
           d.find("cannot decrease scale") != std::string_view::npos;
  }

  void on_step(const Record& r, Rank& s) {
    s.last_step = r.step;
    const double prev_scale = s.scale;
    if (finite(r.loss_scale)) {
      s.scale_logged = true;
      s.scale = *r.loss_scale;
      if (s.scale != 1) s.fp16 = true;
    }
    if (r.overflow || r.skipped) s.flags_logged = true;
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
                             ? (s.streak > kInitialSearchMax || s.scale < kFarAboveFloor)
                             : (judged ? s.streak >= kSkipStreak && s.unexplained >= kUnexplained
                                       : s.streak >= kBlindStreak);
      if (fires && s.fp16) {
        std::vector<std::string> ev{
            fmt::format("loss scale {} -> {} over steps {}..{}, {} steps skipped{}{}", scale(s.streak_scale0),
                        scale(s.scale), s.streak_first, r.step, s.streak, zero(),
                        !s.streak_initial                ? ""
                        : s.streak > kInitialSearchMax ? " (initial scale search never ends)"
                                                       : " (initial scale search down to its floor)")};
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
    more_rules(r, s, bad, zero);  // zero: formatted only when a rule fires
    if (r.opt_step) counted_skips(r, s);
  }

  // (h) the share of steps the optimizer did not apply, from its own count.
  void counted_skips(const Record& r, Rank& s) {
    const bool from_origin = s.count_step < 0;
    const int64_t step0 = from_origin ? 0 : s.count_step, opt0 = from_origin ? 0 : s.count_opt;
    const int64_t steps = r.step - step0, applied = *r.opt_step - opt0, skipped = steps - applied;
    s.count_step = r.step;  // a restart (the step falls) or a frozen step counter starts the count again
    s.count_opt = *r.opt_step;
    if (steps <= 0 || applied < 0 || skipped < 0) return;
    // the run's first kInitialSearchMax skips are its initial search, in whichever stretch they fall
    const int64_t before = from_origin ? 0 : std::max<int64_t>(0, step0 - opt0);
    const int64_t beyond = skipped - std::max<int64_t>(0, kInitialSearchMax - before);
    if (beyond < kCountedSkips || static_cast<double>(skipped) < kSkipFraction * static_cast<double>(steps)) return;
    s.fp16 = true;
    const int64_t onset = std::max(step0 + 1, r.step - skipped + 1);
    fire(r, s, onset, 0.85,
         {fmt::format("{} of the {} steps {}..{} skipped ({:.0f}%; the optimizer applied {} updates: step - opt_step, "
                      "DeepSpeed's skipped= counter): the loss scaler overflows on most steps{}",
                      skipped, steps, step0 + 1, r.step, 100.0 * static_cast<double>(skipped) / static_cast<double>(steps),
                      applied, s.scale <= kFloor && s.skipped_total > 0 ? fmt::format(", at its floor ({})", scale(s.scale)) : "")});
  }

  // (c) floor, (e) clamp, (f) rising zeros, (g) a fall below 1 without flags (the header's list).
  template <class Zero>
  void more_rules(const Record& r, Rank& s, bool bad, const Zero& zero) {
    const bool advanced = s.prev_step < 0 || r.step > s.prev_step;
    const std::optional<double> ls = finite(r.loss_scale) ? r.loss_scale : std::nullopt;
    if (!advanced) {  // a restart re-runs steps: the scales before it say nothing about this one
      s.prev_scale.reset();
      s.falls = s.rising = s.floor_n = 0;
    }
    // (c)
    if (bad && s.fp16) {
      const double used = s.scale;  // on_step took the logged scale when there is one
      if (used <= kFloor || (s.floor_n > 0 && used >= s.floor_scale)) {
        if (s.floor_n++ == 0) s.floor_first = r.step;
        s.floor_scale = used;
        if (s.floor_n >= kFloorOverflows)
          fire(r, s, s.streak > 0 ? s.streak_first : s.floor_first, 0.9,
               {fmt::format("loss scale at its floor ({}) and still overflowing: {} overflows in a row since step {} "
                            "without the scale falling",
                            scale(used), s.floor_n, s.floor_first)});
      } else {
        s.floor_n = used <= kFloor ? 1 : 0;
        s.floor_first = r.step;
        s.floor_scale = used;
      }
    } else if (!bad) {
      s.floor_n = 0;
    }
    if (ls) {
      // (e)
      if (advanced && s.prev_scale && *ls < *s.prev_scale && *ls < kLowScale && r.overflow.has_value() &&
          !*r.overflow && !r.skipped.value_or(false))
        fire(r, s, r.step, 0.9,
             {fmt::format("loss scale {} -> {} at step {} with no overflow: the scaler is clamped{}", scale(*s.prev_scale),
                          scale(*ls), r.step, zero())});
      // (f)
      if (*ls >= kLowScale) {
        if (finite(r.grad_zero_frac)) s.zero_base = *r.grad_zero_frac;
        s.rising = 0;
      } else if (s.fp16 && s.zero_base >= 0 && finite(r.grad_zero_frac) && *r.grad_zero_frac >= s.zero_base + kZeroRise) {
        if (++s.rising >= kLowSteps)
          fire(r, s, s.low_first >= 0 ? s.low_first : r.step, 0.85,
               {fmt::format("loss scale {} since step {}; exactly-zero gradients rose from {:.1f}% to {:.1f}%: they "
                            "underflow in fp16",
                            scale(*ls), s.low_first >= 0 ? s.low_first : r.step, 100 * s.zero_base,
                            100 * *r.grad_zero_frac)});
      } else {
        s.rising = 0;
      }
      // (g)
      const bool flagless = !r.overflow.has_value() && !r.skipped.has_value();
      if (flagless && advanced && s.prev_scale && *ls < *s.prev_scale) {
        if (s.fall_first < 0) s.fall_first = s.prev_step, s.fall_scale0 = *s.prev_scale;
        if (*ls < kLowScale && ++s.falls >= kFalls)
          fire(r, s, s.fall_first, 0.8,
               {fmt::format("loss scale {} -> {} over steps {}..{}, falling on every record: overflow after overflow "
                            "(the log has no overflow flags)",
                            scale(s.fall_scale0), scale(*ls), s.fall_first, r.step)});
      } else if (!(s.prev_scale && *ls == *s.prev_scale && *ls < kLowScale)) {
        s.falls = 0;
        s.fall_first = -1;
      }
      s.prev_scale = ls;
    }
    s.prev_step = r.step;
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
