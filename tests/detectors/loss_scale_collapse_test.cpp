// loss_scale_collapse: silent during the fp16 scaler's initial search, on healthy noise, on fp32, on
// single overflows after growth; fires on an overflow streak, on a scale clamped below 1 with
// underflowing gradients, and on an initial search that never ends.
#include <gtest/gtest.h>

#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr const char* kCause = "loss_scale_collapse";

Spec overflow_streak() {
  Spec sp;
  sp.fp16 = true;
  sp.overflow = [](int64_t step) { return step >= 200 && step < 217; };  // 17 halvings: 65536 -> 0.5
  return sp;
}

// --- 1. warm-up ----------------------------------------------------------------------------------
TEST(LossScaleCollapseDetector, SilentDuringInitialScaleSearch) {
  for (int n : {3, 10, 12}) {  // 12 halvings: 65536 -> 16, still far above the floor (1)
    Spec sp;
    sp.fp16 = true;
    sp.initial_overflows = n;
    auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
    EXPECT_FALSE(d->finding()) << n << ": " << d->finding()->evidence[0];
    EXPECT_EQ(d->check().state, CheckState::pass);
  }
  Spec sp;
  sp.fp16 = true;
  sp.initial_overflows = 3;
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_EQ(d->check().detail, "fp16: loss scale 8192 at step 300; 3 skipped step(s), initial scale search 3 step(s)");
}

// --- 2. healthy noise and look-alikes -------------------------------------------------------------
TEST(LossScaleCollapseDetector, SilentOnHealthyFp16Noise) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.fp16 = true;
    sp.initial_overflows = 3;
    sp.growth_interval = 40;  // grows often; each growth overflows once and backs off
    sp.overflow_after_growth = true;
    auto d = run_detector(kCause, interleave(generate(sp), Order::chunked, seed), 2);
    EXPECT_FALSE(d->finding()) << "seed " << seed;
  }
}

TEST(LossScaleCollapseDetector, SilentOnTwoOverflowsInARow) {
  Spec sp;
  sp.fp16 = true;
  sp.overflow = [](int64_t step) { return step == 100 || step == 101 || step == 200; };  // a loss spike
  EXPECT_FALSE(run_finding(kCause, sp));
}

// Gradients grow in warmup after a 2^32 start (Megatron's default): the scaler searches down again
// through 6 overflows in a row, each one at a scale far too high for the gradients. Healthy.
TEST(LossScaleCollapseDetector, SilentOnReSearchExplainedByTheScale) {
  Spec sp;
  sp.fp16 = true;
  sp.init_scale = std::ldexp(1.0, 32);
  sp.initial_overflows = 8;  // 2^32 -> 2^24
  sp.overflow = [](int64_t step) { return step == 19 || step == 24 || (step >= 27 && step <= 32); };
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding()) << d->finding()->evidence[0];
}

// The same streak at a scale the gradients fit in (2^10 x ~0.6 << 65504) is a broken layer.
TEST(LossScaleCollapseDetector, FiresOnAStreakUnexplainedByTheScale) {
  Spec sp;
  sp.fp16 = true;
  sp.init_scale = 1024;
  sp.overflow = [](int64_t step) { return step >= 150 && step < 156; };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 150);
  EXPECT_EQ(f->detected_step, 152);
  ASSERT_EQ(f->evidence.size(), 2u);
  EXPECT_NE(f->evidence[1].find("below half the fp16 max"), std::string::npos) << f->evidence[1];
}

TEST(LossScaleCollapseDetector, WithoutGradNormAStreakOfTenFires) {
  Spec sp = overflow_streak();
  sp.mutate = [](Record& r) { r.grad_norm.reset(); };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 209);
}

TEST(LossScaleCollapseDetector, PassesOnFp32) {
  Spec sp;  // fp32: loss_scale 1, no overflow
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::pass);
  EXPECT_EQ(d->check().detail, "not fp16 (loss scale 1, no overflow)");
  // The flags without the scale: no overflow is still evidence of no collapse.
  sp.loss_scale = false;
  d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_EQ(d->check().state, CheckState::pass);
  EXPECT_EQ(d->check().detail, "not fp16 (no overflow; loss_scale not logged)");
  // Neither: nothing says whether the run is fp16, so the check has not run.
  sp.mutate = [](Record& r) { r.overflow.reset(), r.skipped.reset(); };
  d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::cannot_run);
  EXPECT_EQ(d->check().detail,
            "missing loss_scale: log the loss scale (GradScaler.get_scale()) and skipped/overflow steps");
}

// --- 3. injected faults ---------------------------------------------------------------------------
TEST(LossScaleCollapseDetector, FiresOnOverflowStreak) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Spec sp = overflow_streak();
    sp.seed = seed;
    auto f = run_finding(kCause, sp);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->onset_step, 200);
    EXPECT_EQ(f->detected_step, 202);
    EXPECT_EQ(f->rank, -1);
    EXPECT_EQ(f->evidence[0], "loss scale 65536 -> 16384 over steps 200..202, 3 steps skipped");
  }
}

TEST(LossScaleCollapseDetector, FiresOnScaleClampedLow) {
  Spec sp;
  sp.fp16 = true;  // no overflow at all: only the scale says this is fp16
  sp.max_scale = [](int64_t step) { return step >= 150 ? 1.0 / 256 : 1e30; };  // grads underflow to 0
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 150);
  // The fall without an overflow is the clamp itself (it was once detected at 151, by the underflow).
  EXPECT_EQ(f->detected_step, 150);
  EXPECT_EQ(f->evidence[0], "loss scale 65536 -> 0.0039 at step 150 with no overflow: the scaler is clamped, 98% of grads zero");
}

// The initial-search exemption holds only while the scale is far above its floor. A search
// of 16 halvings (65536 -> 1) was silent before; it fires once the scale is below 16.
TEST(LossScaleCollapseDetector, InitialSearchDownToTheFloorIsNotExempt) {
  Spec sp;
  sp.fp16 = true;
  sp.initial_overflows = 16;
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 1);
  EXPECT_EQ(f->detected_step, 14);
  EXPECT_EQ(f->evidence[0],
            "loss scale 65536 -> 8 over steps 1..14, 14 steps skipped (initial scale search down to its floor)");
}

TEST(LossScaleCollapseDetector, FiresOnInitialSearchThatNeverEnds) {
  Spec sp;
  sp.fp16 = true;
  sp.initial_overflows = 1000;  // every step overflows: the scale is below 16 (its floor x 16) at step 14
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 1);
  EXPECT_EQ(f->detected_step, 14);  // (was 18 while the exemption held down to a scale of 1)

  sp.init_scale = std::ldexp(1.0, 40);  // a huge initial scale: still >= 1 after 30 halvings
  f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 1);
  EXPECT_EQ(f->detected_step, 31);
  EXPECT_NE(f->evidence[0].find("31 steps skipped (initial scale search never ends)"), std::string::npos)
      << f->evidence[0];
}

TEST(LossScaleCollapseDetector, SameFindingWhateverTheInterleaving) {
  auto rs = generate(overflow_streak());
  expect_same_finding_whatever_the_interleaving(kCause, rs);
}

TEST(LossScaleCollapseDetector, OddDataDoesNotThrow) {
  auto d = make_detector(kCause, {});
  Record r;
  for (int i = 0; i < 40; ++i) {
    r.rank = i % 3;
    r.step = i % 4 ? i : 3;
    r.loss_scale = i % 5 ? std::ldexp(1.0, 16 - i) : std::nan("");
    r.overflow = i % 2 == 0;
    if (i % 3) r.skipped.reset();
    else r.skipped = true;
    r.grad_norm = i % 7 ? std::numeric_limits<double>::infinity() : 0.0;
    EXPECT_NO_THROW(d->observe(r));
  }
  EXPECT_NO_THROW(d->check());
}


// --- the scaler's floor, its error, a clamp, rising zeros, a fall without flags (DESIGN §10) -------
namespace floor_and_falls {

Record step(int64_t s, double scale, std::optional<bool> overflow, std::optional<double> zeros = std::nullopt) {
  Record r;
  r.step = s;
  r.t = static_cast<double>(s);
  r.loss = 2.5;
  r.lr = 1e-3;
  r.loss_scale = scale;
  r.overflow = overflow;
  if (overflow) r.skipped = *overflow;
  r.grad_zero_frac = zeros;
  if (!overflow.value_or(false)) r.grad_norm = 1.0;
  return r;
}

std::optional<Finding> run(const std::vector<Record>& recs) { return run_detector(kCause, recs, 1)->finding(); }

TEST(LossScaleCollapseDetector, OverflowsAtTheFloorFireEvenInTheInitialSearch) {
  // DeepSpeed "Attempted loss scale: 1, reducing to 1" from the very first step.
  std::vector<Record> v;
  for (int64_t s = 1; s <= 5; ++s) v.push_back(step(s, 1, true));
  auto f = run(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 1);
  EXPECT_EQ(f->detected_step, 1);  // a search that starts at the floor is over at once
  EXPECT_EQ(f->evidence[0], "loss scale 1 -> 1 over steps 1..1, 1 steps skipped (initial scale search down to its floor)");
  // A configured minimum above 1 ("reducing to" the same value), after healthy steps.
  v.clear();
  for (int64_t s = 1; s <= 50; ++s) v.push_back(step(s, 1024, false));
  for (int64_t s = 51; s <= 55; ++s) v.push_back(step(s, 128, true));
  f = run(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 53);
}

TEST(LossScaleCollapseDetector, HysteresisAndBf16AreNotAFloor) {
  std::vector<Record> v;
  for (int64_t s = 1; s <= 50; ++s) v.push_back(step(s, 65536, false));
  v.push_back(step(51, 65536, true));  // hysteresis: the scale kept once
  v.push_back(step(52, 65536, true));  // then halved
  for (int64_t s = 53; s <= 100; ++s) v.push_back(step(s, 32768, false));
  EXPECT_FALSE(run(v));
  v.clear();
  for (int64_t s = 1; s <= 200; ++s) v.push_back(step(s, 1, false));  // bf16: "loss scale: 1.0", never an overflow
  EXPECT_FALSE(run(v));
}

TEST(LossScaleCollapseDetector, MinimumScaleErrorFires) {
  std::vector<Record> v;
  for (int64_t s = 1; s <= 20; ++s) v.push_back(step(s, 4, false));
  Record e;
  e.kind = RecordKind::event;
  e.step = 20;
  e.name = "error";
  e.detail = "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.";
  v.push_back(e);
  auto f = run(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 20);
  EXPECT_EQ(f->confidence, 0.95);
}

TEST(LossScaleCollapseDetector, RisingZerosBelowOneWithoutOverflowFlags) {
  // TensorBoard: only the scale and the zero fraction. Forced from 65536 to 2^-16 at step 50; a third
  // of the gradient elements underflow (tb-gradscaler-clamped, a real GradScaler run).
  std::vector<Record> v;
  for (int64_t s = 1; s <= 49; ++s) v.push_back(step(s, 65536, std::nullopt, 0.0));
  for (int64_t s = 50; s <= 80; ++s) v.push_back(step(s, std::ldexp(1.0, -16), std::nullopt, 0.33));
  auto f = run(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 50);
  EXPECT_EQ(f->detected_step, 51);
  EXPECT_EQ(f->evidence[0],
            "loss scale 1.5e-05 since step 50; exactly-zero gradients rose from 0.0% to 33.0%: they underflow in fp16");
  // Zeros that were there before the scale fell are not a rise.
  for (auto& r : v) r.grad_zero_frac = 0.33;
  EXPECT_FALSE(run(v));
}

TEST(LossScaleCollapseDetector, AFallBelowOneOnEveryRecordWithoutFlags) {
  // GradScaler halving on every step from step 50 (an inf in the forward), logged every 2nd step.
  std::vector<Record> v;
  double scale = 65536;
  for (int64_t s = 2; s <= 120; s += 2) {
    if (s > 50) scale /= 4;
    v.push_back(step(s, scale, std::nullopt));
  }
  auto f = run(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 50);
  EXPECT_EQ(f->detected_step, 70);  // 0.25 at 68, 0.0625 at 70: two falls below 1
  EXPECT_EQ(f->evidence[0],
            "loss scale 65536 -> 0.062 over steps 50..70, falling on every record: overflow after overflow (the log has "
            "no overflow flags)");
}

TEST(LossScaleCollapseDetector, ARestartIsNotAFall) {
  std::vector<Record> v;
  for (int64_t s = 1; s <= 100; ++s) v.push_back(step(s, s > 60 ? 131072 : 65536, false));
  for (int64_t s = 51; s <= 100; ++s) v.push_back(step(s, 65536, false));  // resumed from a checkpoint at 50
  EXPECT_FALSE(run(v));
}

}  // namespace floor_and_falls

}  // namespace
}  // namespace flatline::testing
