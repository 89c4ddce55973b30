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

#include <algorithm>
#include <limits>
#include <string_view>

#include "detectors/gated_ranks.h"
#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace loss_scale_collapse;  // its thresholds (detectors/loss_scale_collapse.h)

// A rank's flags (bits of one int64 per rank, LossScaleCollapse::bits_).
constexpr int64_t kQuiet = 1;        // every streak and stretch of the rules is at rest (Rank::quiet())
constexpr int64_t kScaleLogged = 2;  // a loss_scale was logged
constexpr int64_t kFlagsLogged = 4;  // an overflow or skipped flag was logged
constexpr int64_t kApplied = 8;      // an applied (not skipped) step was seen
constexpr int64_t kHasPrev = 16;     // the previous record's scale is known (more_rules' prev_scale)
constexpr int64_t kFp16 = 32;        // fp16: a scale other than 1, or an overflow

// The plain rows of a block in lockstep (row i = rank i): an applied step (no overflow, not skipped) whose
// scale is finite and >= 1, on a rank whose rules are all at rest and whose flags this row does not
// change, one step after the last, without a fall of the scale in a log without flags and without a
// counted share of skips (h) that could fire: it only moves the running values (step, scale, the last
// applied grad norm, the zero-gradient level, the opt_step count). Branch-free over 64-bit columns so
// that it vectorises (kept out of line: once inlined, GCC 12 no longer vectorises it). odd[i] = 1 for a
// row the rules must see in full; returns how many.
__attribute__((noinline)) size_t plain_rows(size_t n, const double* __restrict ls, const uint64_t* __restrict flags,
                                            const int64_t* __restrict step, const int64_t* __restrict opt,
                                            const double* __restrict gn, const double* __restrict zf,
                                            const int64_t* __restrict bits, int64_t* __restrict last,
                                            double* __restrict scale_now, double* __restrict prev_scale,
                                            double* __restrict last_gn, double* __restrict zero_base,
                                            int64_t* __restrict count_step, int64_t* __restrict count_opt,
                                            int64_t* __restrict odd) {
  size_t n_odd = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = flags[i];
    const double l = ls[i];
    const int64_t flags = (h & (StepBlock::kOverflow | StepBlock::kSkipped)) != 0;
    const int64_t want = kQuiet | kScaleLogged | kApplied | kHasPrev | (flags != 0 ? kFlagsLogged : 0) | (l != 1 ? kFp16 : 0);
    int64_t ok = (h & StepBlock::kLossScale) != 0;  // one test a statement: GCC if-converts them so
    ok &= l >= kLowScale;
    ok &= l < std::numeric_limits<double>::infinity();
    ok &= (h & (StepBlock::kOverflowValue | StepBlock::kSkippedValue)) == 0;
    ok &= step[i] > last[i];
    ok &= (bits[i] & want) == want;
    ok &= 1 - ((1 - flags) & (l < prev_scale[i]));
    // (h) as counted_skips() computes it: a row that could fire goes through the rules
    const int64_t has_opt = (h & StepBlock::kOptStep) / StepBlock::kOptStep, origin = count_step[i] < 0;
    const int64_t s0 = origin != 0 ? 0 : count_step[i], o0 = origin != 0 ? 0 : count_opt[i];
    const int64_t steps = step[i] - s0, applied = opt[i] - o0, skipped = steps - applied;
    const int64_t d0 = s0 - o0, before = origin != 0 ? 0 : (d0 > 0 ? d0 : 0), room = kInitialSearchMax - before;
    const int64_t beyond = skipped - (room > 0 ? room : 0);
    ok &= 1 - (has_opt & (steps > 0) & (applied >= 0) & (skipped >= 0) & (beyond >= kCountedSkips));
    odd[i] = 1 - ok;
    n_odd += static_cast<size_t>(1 - ok);
    last[i] = ok != 0 ? step[i] : last[i];
    scale_now[i] = ok != 0 ? l : scale_now[i];
    prev_scale[i] = ok != 0 ? l : prev_scale[i];
    last_gn[i] = (ok & (gn[i] - gn[i] == 0)) != 0 ? gn[i] : last_gn[i];
    zero_base[i] = (ok & (zf[i] - zf[i] == 0)) != 0 ? zf[i] : zero_base[i];
    count_step[i] = (ok & has_opt) != 0 ? step[i] : count_step[i];
    count_opt[i] = (ok & has_opt) != 0 ? opt[i] : count_opt[i];
  }
  return n_odd;
}

class LossScaleCollapse final : public BlockDetector {
 public:
  explicit LossScaleCollapse(const DetectorConfig& c) : seen_(c.world_size, /*exact_positions=*/true) {}
  const char* cause() const override { return "loss_scale_collapse"; }

  void observe_event(const Record& r) override {
    if (r.kind != RecordKind::event || r.rank < 0 || r.name != event::error || !min_scale_error(r.detail)) return;
    const size_t k = static_cast<size_t>(r.rank);
    grow(k + 1);
    seen_.present[k] = 1;
    bits_[k] |= kFp16;
    const Rank& x = rare_[k];
    seen_.gate.offer(r.rank, std::max(0.0, seen_.gate.position(r.rank)),
                Finding{cause(), -1, x.streak > 0 ? x.streak_first : r.step, r.step, r.t, 0.95,
                        {fmt::format("the loss scaler reached its minimum and the run exits: \"{}\"", r.detail)}});
    seen_.gate.poll();
  }

  // One pass over the block's step rows: in a block in lockstep the plain rows in one vectorised loop
  // (plain_rows) and the others through on_step(), the rules in full; else every row through on_step().
  void observe_block(const StepBlock& b) override {
    const auto grow_to = [this](size_t k) { grow(k); };
    if (!seen_.start(b, grow_to)) return;
    const size_t odd = b.lockstep ? plain_rows(b.rows(), b.loss_scale.data(), b.flags.data(), b.step.data(),
                                               b.opt_step.data(), b.grad_norm.data(), b.grad_zero_frac.data(),
                                               bits_.data(), last_step_.data(), scale_.data(), prev_scale_.data(),
                                               last_gn_.data(), zero_base_.data(), count_step_.data(),
                                               count_opt_.data(), seen_.odd.data())
                                  : 0;
    seen_.finish_pass(b, odd, grow_to, [&](size_t i, int r, double ord) { on_step(b, i, r, ord); });
  }
  void finish(double) override { seen_.gate.flush(); }
  std::optional<Finding> finding() const override { return seen_.gate.finding(); }

  CheckResult check() const override {
    if (auto settled = seen_.check(cause())) return *settled;
    for (size_t k = 0; k < seen_.present.size(); ++k) {
      if (!seen_.present[k] || !(bits_[k] & kFp16)) continue;
      return {cause(), CheckState::pass,
              fmt::format("fp16: loss scale {} at step {}; {} skipped step(s), initial scale search {} step(s)",
                          scale(scale_[k]), last_step_[k], rare_[k].skipped_total, rare_[k].initial_search)};
    }
    bool scale_logged = false, flags_logged = false;
    for (size_t k = 0; k < seen_.present.size(); ++k)
      if (seen_.present[k]) scale_logged |= (bits_[k] & kScaleLogged) != 0, flags_logged |= (bits_[k] & kFlagsLogged) != 0;
    // Nothing logged of the scaler (an HF trainer_state.json): whether it is fp16 is not known, so the
    // check has not run; a pass would claim what no record says.
    if (!scale_logged && !flags_logged)
      return {cause(), CheckState::cannot_run,
              "missing loss_scale: log the loss scale (GradScaler.get_scale()) and skipped/overflow steps"};
    return {cause(), CheckState::pass,
            scale_logged ? "not fp16 (loss scale 1, no overflow)" : "not fp16 (no overflow; loss_scale not logged)"};
  }

 private:
  // What only the rules in full read and write, per rank. The running values every row moves are in
  // the arrays below (bits_, last_step_, scale_, ...).
  struct Rank {
    int64_t skipped_total = 0, initial_search = 0;
    // (a) skip streak
    int streak = 0, unexplained = 0;
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
    // (f), (g)
    int rising = 0, falls = 0;
    int64_t fall_first = -1;
    double fall_scale0 = 1;
    bool quiet() const {  // what a plain row leaves (plain_rows): every rule at rest
      return streak == 0 && low_first == -1 && underflow == 0 && floor_n == 0 && rising == 0 && falls == 0 &&
             fall_first == -1;
    }
  };

  static bool min_scale_error(std::string_view d) {
    return d.find("loss scale already at minimum") != std::string_view::npos ||
           d.find("cannot decrease scale") != std::string_view::npos;
  }

  void grow(size_t n) {
    if (seen_.present.size() >= n) return;
    seen_.present.resize(n, 0), bits_.resize(n, kQuiet), last_step_.resize(n, -1), count_step_.resize(n, -1);
    count_opt_.resize(n, -1), scale_.resize(n, 1), prev_scale_.resize(n, 0), last_gn_.resize(n, -1);
    zero_base_.resize(n, -1), rare_.resize(n);
  }

  // Row i of rank r (its ordinal `ord`): every rule (the header's list).
  void on_step(const StepBlock& b, size_t i, int r, double ord) {
    const size_t k = static_cast<size_t>(r);
    Rank& s = rare_[k];
    int64_t& bits = bits_[k];
    const uint64_t h = b.flags[i];
    const int64_t step = b.step[i], prev_step = last_step_[k];  // the step before this row
    last_step_[k] = step;
    const double prev_scale = scale_[k];
    const double lsv = b.loss_scale[i];
    const bool ls_ok = (h & StepBlock::kLossScale) && std::isfinite(lsv);
    if (ls_ok) {
      bits |= kScaleLogged;
      scale_[k] = lsv;
      if (lsv != 1) bits |= kFp16;
    }
    const bool has_ov = h & StepBlock::kOverflow, has_sk = h & StepBlock::kSkipped;
    if (has_ov || has_sk) bits |= kFlagsLogged;
    const bool skipped = b.skipped(i);  // false when absent
    const bool overflow = has_ov ? b.overflow(i) : skipped;
    const bool bad = overflow || skipped;
    if (overflow) bits |= kFp16;
    const double zf = b.grad_zero_frac[i], gn = b.grad_norm[i];  // NaN when absent
    // for the evidence only: formatted when it fires, not on every step
    auto zero = [zf] {
      return std::isfinite(zf) && zf >= 0.01 ? fmt::format(", {:.0f}% of grads zero", 100 * zf) : std::string();
    };
    auto fp16 = [&bits] { return (bits & kFp16) != 0; };
    // --- (a) a streak of skipped steps
    if (bad) {
      ++s.skipped_total;
      if (s.streak++ == 0) {
        s.streak_first = step;
        s.streak_scale0 = ls_ok ? lsv : prev_scale;
        s.streak_initial = !(bits & kApplied);
        s.unexplained = 0;
      }
      const double used = ls_ok ? lsv : scale_[k];
      const double lgn = last_gn_[k];
      if (lgn >= 0 && used * lgn < kFp16Max / 2) ++s.unexplained;
      if (s.streak_initial) s.initial_search = s.streak;
      const bool judged = lgn >= 0;
      const bool fires = s.streak_initial ? (s.streak > kInitialSearchMax || scale_[k] < kFarAboveFloor)
                                          : (judged ? s.streak >= kSkipStreak && s.unexplained >= kUnexplained
                                                    : s.streak >= kBlindStreak);
      if (fires && fp16()) {
        std::vector<std::string> ev{
            fmt::format("loss scale {} -> {} over steps {}..{}, {} steps skipped{}{}", scale(s.streak_scale0),
                        scale(scale_[k]), s.streak_first, step, s.streak, zero(),
                        !s.streak_initial                ? ""
                        : s.streak > kInitialSearchMax ? " (initial scale search never ends)"
                                                       : " (initial scale search down to its floor)")};
        if (!s.streak_initial && judged)
          ev.push_back(fmt::format("{} overflow(s) at scale x grad_norm ({} x {}) below half the fp16 max: not the "
                                   "scale, an inf in the model",
                                   s.unexplained, scale(used), num(lgn)));
        fire(b, i, r, ord, s.streak_first, 0.85, std::move(ev));
      }
    } else {
      s.streak = 0;
      bits |= kApplied;
      if (std::isfinite(gn)) last_gn_[k] = gn;
    }
    // --- (b) scale below 1 and the gradients underflow
    if (ls_ok && lsv < kLowScale) {
      if (s.low_first < 0) {
        s.low_first = step;
        s.low_scale0 = prev_scale;
      }
      const bool under = (std::isfinite(zf) && zf > kZeroFrac) || (std::isfinite(gn) && gn == 0);
      s.underflow = under ? s.underflow + 1 : 0;
      if (s.underflow >= kLowSteps && fp16())
        fire(b, i, r, ord, s.low_first, 0.9,
             {fmt::format("loss scale {} -> {} since step {}; gradients underflow{}{}", scale(s.low_scale0),
                          scale(lsv), s.low_first, zero(), std::isfinite(gn) ? ", grad_norm " + num(gn) : "")});
    } else if (ls_ok) {
      s.low_first = -1;
      s.underflow = 0;
    }
    more_rules(b, i, r, ord, prev_step, bad, zero);  // zero: formatted only when a rule fires
    if (h & StepBlock::kOptStep) counted_skips(b, i, r, ord);
    bits = (bits & ~kQuiet) | (s.quiet() ? kQuiet : 0);
  }

  // (h) the share of steps the optimizer did not apply, from its own count.
  void counted_skips(const StepBlock& b, size_t i, int r, double ord) {
    const size_t k = static_cast<size_t>(r);
    const int64_t step = b.step[i], opt = b.opt_step[i];
    const bool from_origin = count_step_[k] < 0;
    const int64_t step0 = from_origin ? 0 : count_step_[k], opt0 = from_origin ? 0 : count_opt_[k];
    const int64_t steps = step - step0, applied = opt - opt0, skipped = steps - applied;
    count_step_[k] = step;  // a restart (the step falls) or a frozen step counter starts the count again
    count_opt_[k] = opt;
    if (steps <= 0 || applied < 0 || skipped < 0) return;
    // the run's first kInitialSearchMax skips are its initial search, in whichever stretch they fall
    const int64_t before = from_origin ? 0 : std::max<int64_t>(0, step0 - opt0);
    const int64_t beyond = skipped - std::max<int64_t>(0, kInitialSearchMax - before);
    if (beyond < kCountedSkips || static_cast<double>(skipped) < kSkipFraction * static_cast<double>(steps)) return;
    bits_[k] |= kFp16;
    const int64_t onset = std::max(step0 + 1, step - skipped + 1);
    const Rank& s = rare_[k];
    fire(b, i, r, ord, onset, 0.85,
         {fmt::format("{} of the {} steps {}..{} skipped ({:.0f}%; the optimizer applied {} updates: step - opt_step, "
                      "DeepSpeed's skipped= counter): the loss scaler overflows on most steps{}",
                      skipped, steps, step0 + 1, step, 100.0 * static_cast<double>(skipped) / static_cast<double>(steps),
                      applied,
                      scale_[k] <= kFloor && s.skipped_total > 0 ? fmt::format(", at its floor ({})", scale(scale_[k]))
                                                                 : "")});
  }

  // (c) floor, (e) clamp, (f) rising zeros, (g) a fall below 1 without flags (the header's list).
  template <class Zero>
  void more_rules(const StepBlock& b, size_t i, int r, double ord, int64_t prev_step, bool bad, const Zero& zero) {
    const size_t k = static_cast<size_t>(r);
    Rank& s = rare_[k];
    int64_t& bits = bits_[k];
    const uint64_t h = b.flags[i];
    const int64_t step = b.step[i];
    const bool advanced = prev_step < 0 || step > prev_step;
    const bool has_ls = (h & StepBlock::kLossScale) && std::isfinite(b.loss_scale[i]);
    const double ls = b.loss_scale[i], zf = b.grad_zero_frac[i];
    const bool fp16 = bits & kFp16;
    if (!advanced) {  // a restart re-runs steps: the scales before it say nothing about this one
      bits &= ~kHasPrev;
      s.falls = s.rising = s.floor_n = 0;
    }
    // (c)
    if (bad && fp16) {
      const double used = scale_[k];  // on_step took the logged scale when there is one
      if (used <= kFloor || (s.floor_n > 0 && used >= s.floor_scale)) {
        if (s.floor_n++ == 0) s.floor_first = step;
        s.floor_scale = used;
        if (s.floor_n >= kFloorOverflows)
          fire(b, i, r, ord, s.streak > 0 ? s.streak_first : s.floor_first, 0.9,
               {fmt::format("loss scale at its floor ({}) and still overflowing: {} overflows in a row since step {} "
                            "without the scale falling",
                            scale(used), s.floor_n, s.floor_first)});
      } else {
        s.floor_n = used <= kFloor ? 1 : 0;
        s.floor_first = step;
        s.floor_scale = used;
      }
    } else if (!bad) {
      s.floor_n = 0;
    }
    if (has_ls) {
      const bool has_prev = bits & kHasPrev;
      const double prev = prev_scale_[k];
      // (e)
      if (advanced && has_prev && ls < prev && ls < kLowScale && (h & StepBlock::kOverflow) && !b.overflow(i) &&
          !b.skipped(i))
        fire(b, i, r, ord, step, 0.9,
             {fmt::format("loss scale {} -> {} at step {} with no overflow: the scaler is clamped{}", scale(prev),
                          scale(ls), step, zero())});
      // (f)
      if (ls >= kLowScale) {
        if (std::isfinite(zf)) zero_base_[k] = zf;
        s.rising = 0;
      } else if (fp16 && zero_base_[k] >= 0 && std::isfinite(zf) && zf >= zero_base_[k] + kZeroRise) {
        if (++s.rising >= kLowSteps)
          fire(b, i, r, ord, s.low_first >= 0 ? s.low_first : step, 0.85,
               {fmt::format("loss scale {} since step {}; exactly-zero gradients rose from {:.1f}% to {:.1f}%: they "
                            "underflow in fp16",
                            scale(ls), s.low_first >= 0 ? s.low_first : step, 100 * zero_base_[k], 100 * zf)});
      } else {
        s.rising = 0;
      }
      // (g)
      const bool flagless = !(h & StepBlock::kOverflow) && !(h & StepBlock::kSkipped);
      if (flagless && advanced && has_prev && ls < prev) {
        if (s.fall_first < 0) s.fall_first = prev_step, s.fall_scale0 = prev;
        if (ls < kLowScale && ++s.falls >= kFalls)
          fire(b, i, r, ord, s.fall_first, 0.8,
               {fmt::format("loss scale {} -> {} over steps {}..{}, falling on every record: overflow after overflow "
                            "(the log has no overflow flags)",
                            scale(s.fall_scale0), scale(ls), s.fall_first, step)});
      } else if (!(has_prev && ls == prev && ls < kLowScale)) {
        s.falls = 0;
        s.fall_first = -1;
      }
      prev_scale_[k] = ls;
      bits |= kHasPrev;
    }
  }

  void fire(const StepBlock& b, size_t i, int r, double ord, int64_t onset, double confidence,
            std::vector<std::string> evidence) {
    seen_.gate.offer(r, ord, Finding{cause(), -1, onset, b.step[i], b.t[i], confidence, std::move(evidence)});
  }

  // per rank: the running values in arrays a block's pass reads and writes (64-bit wide, so that
  // plain_rows vectorises), the rest in rare_
  std::vector<int64_t> bits_, last_step_, count_step_, count_opt_;
  std::vector<double> scale_, prev_scale_, last_gn_, zero_base_;
  std::vector<Rank> rare_;
  GatedRanks seen_;  // present ranks, the gate, the block's odd rows (detectors/gated_ranks.h)
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("loss_scale_collapse", LossScaleCollapse);

}  // namespace flatline
