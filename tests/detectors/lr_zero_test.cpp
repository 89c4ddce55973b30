// lr_zero: silent during a warmup from lr 0, silent on healthy noise and on a cosine tail to 10%
// (and to exactly 0.1%) of peak; fires on a schedule sized too short, a finished schedule restored
// on resume, a warmup stuck at 0, and (without lr) a model that stops moving.
#include <gtest/gtest.h>

#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr const char* kCause = "lr_zero";

// --- 1. warm-up ----------------------------------------------------------------------------------
TEST(LrZeroDetector, SilentDuringWarmupFromZero) {
  Spec sp;
  sp.steps = 30;  // lr(step 1) = 0, then rising to the peak at step 21
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::pass);
}

// --- 2. healthy noise and look-alikes -------------------------------------------------------------
TEST(LrZeroDetector, SilentOnHealthyNoise) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Spec sp;
    sp.seed = seed;
    auto d = run_detector(kCause, interleave(generate(sp), Order::chunked, seed), 2);
    EXPECT_FALSE(d->finding()) << "seed " << seed;
    EXPECT_EQ(d->check().state, CheckState::pass);
    EXPECT_EQ(d->check().detail, "lr 3.0e-04 at step 300 = 10.0% of peak 3.0e-03 (step 21)");
  }
}

TEST(LrZeroDetector, SilentOnCosineTailToMinLr) {
  for (double frac : {0.1, 0.001}) {  // healthy: min_lr >= 0.1% of peak
    Spec sp;
    sp.steps = 500;
    sp.total = 300;  // 200 steps at min_lr after the schedule ends
    sp.min_lr = frac * sp.peak_lr;
    auto f = run_finding(kCause, sp);
    EXPECT_FALSE(f) << frac << ": " << f->evidence[0];
  }
}

TEST(LrZeroDetector, SilentOnASingleStepAtZero) {
  Spec sp;
  sp.lr = [](int64_t step, bool, double h) { return step == 150 ? 0.0 : h; };
  EXPECT_FALSE(run_finding(kCause, sp));
  auto rs = generate(sp);
  for (auto& rank : rs)  // the same line written twice is still one step
    for (size_t i = 0; i < rank.size(); ++i)
      if (rank[i].kind == RecordKind::step && rank[i].step == 150) {
        rank.insert(rank.begin() + static_cast<long>(i), rank[i]);
        break;
      }
  EXPECT_FALSE(run_detector(kCause, interleave(rs, Order::by_time), 2)->finding());
}

TEST(LrZeroDetector, SkippedStepsAreNotCounted) {
  Spec sp;
  sp.fp16 = true;
  sp.overflow = [](int64_t step) { return step >= 150 && step < 160; };  // lr 0 on skipped steps only
  sp.lr = [](int64_t step, bool, double h) { return step >= 150 && step < 160 ? 0.0 : h; };
  EXPECT_FALSE(run_finding(kCause, sp));
}

// --- 3. injected faults ---------------------------------------------------------------------------
TEST(LrZeroDetector, FiresOnScheduleTotalTooShort) {
  // Cosine sized for 200 steps (min_lr 0) in a 300-step run: lr(k) < 0.1% of peak from k = 197,
  // i.e. step 198 (0.5 * (1 + cos(pi * 177/180)) = 6.9e-4; at step 197 it is 1.2e-3).
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Spec sp;
    sp.seed = seed;
    Spec fault = sp;
    fault.total = 200;
    fault.min_lr = 0;
    sp.lr = [fault](int64_t step, bool, double) { return healthy_lr(fault, step); };
    auto f = run_finding(kCause, sp);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->onset_step, 198);
    EXPECT_EQ(f->detected_step, 199);
    EXPECT_EQ(f->rank, -1);
    EXPECT_NE(f->evidence[0].find("since step 198 (peak 3.0e-03 at step 21)"), std::string::npos) << f->evidence[0];
  }
}

TEST(LrZeroDetector, FiresOnFinishedScheduleRestoredOnResume) {
  Spec sp;
  sp.steps = 400;
  sp.checkpoint_at = {300};
  sp.restart_after = 350;
  sp.restart_from = 300;
  sp.lr = [](int64_t, bool after_restart, double h) { return after_restart ? 0.0 : h; };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 301);
  EXPECT_EQ(f->detected_step, 302);
  EXPECT_EQ(f->evidence[0], "lr = 0 since step 301 (peak 3.0e-03 at step 21)");
  EXPECT_DOUBLE_EQ(f->confidence, 0.95);
}

TEST(LrZeroDetector, FiresOnWarmupStuckAtZero) {
  Spec sp;
  sp.lr = [](int64_t, bool, double) { return 0.0; };  // the scheduler never steps
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 1);
  EXPECT_EQ(f->detected_step, 3);
  EXPECT_EQ(f->evidence[0], "lr = 0 on the first 3 applied steps (1..3): warmup never leaves 0");
}

TEST(LrZeroDetector, WarmupStuckAtZeroCountsOnlyAppliedSteps) {
  Spec sp;
  sp.fp16 = true;
  sp.initial_overflows = 3;  // steps 1..3 skipped by the scaler's initial search
  sp.lr = [](int64_t, bool, double) { return 0.0; };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 4);
  EXPECT_EQ(f->detected_step, 6);
}

TEST(LrZeroDetector, FallbackOnUpdateNormWithoutLr) {
  Spec sp;
  sp.lr_field = false;
  sp.mutate = [](Record& r) {
    if (r.step >= 150) r.update_norm = 0.0;  // the parameters stop moving, gradients do not
  };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 150);
  EXPECT_EQ(f->detected_step, 152);
  EXPECT_NE(f->evidence[0].find("(lr not logged)"), std::string::npos);

  Spec healthy;
  healthy.lr_field = false;
  auto d = run_detector(kCause, interleave(generate(healthy), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::pass);
  EXPECT_NE(d->check().detail.find("lr not logged"), std::string::npos);
}

TEST(LrZeroDetector, CannotRunWithoutLrOrUpdateNorm) {
  Spec sp;
  sp.lr_field = false;
  sp.update_norm = false;
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::cannot_run);
  EXPECT_EQ(d->check().detail, "missing lr: log the learning rate per step");
}

TEST(LrZeroDetector, SameFindingWhateverTheInterleaving) {
  Spec sp;
  sp.steps = 400;
  sp.checkpoint_at = {300};
  sp.restart_after = 350;
  sp.restart_from = 300;
  sp.lr = [](int64_t, bool after_restart, double h) { return after_restart ? 0.0 : h; };
  auto rs = generate(sp);
  expect_same_finding_whatever_the_interleaving(kCause, rs);
}

TEST(LrZeroDetector, OddDataDoesNotThrow) {
  auto d = make_detector(kCause, {});
  Record r;
  for (int i = 0; i < 40; ++i) {
    r.rank = i % 3;
    r.step = i % 4 ? i : 3;
    r.lr = i % 5 == 0 ? std::nan("") : (i % 7 == 0 ? -1.0 : 0.0);
    r.t = i % 2 ? std::nan("") : 50.0 - i;
    r.skipped = i % 9 == 0;
    EXPECT_NO_THROW(d->observe(r));
  }
  EXPECT_NO_THROW(d->check());
}

}  // namespace
}  // namespace flatline::testing
