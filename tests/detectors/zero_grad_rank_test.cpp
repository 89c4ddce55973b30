// zero_grad_rank: silent at the start of a run and on the fp16 initial search, silent on healthy
// noise (4 ranks), on one rank whose gradients are merely small, on all ranks zero together (loss
// scale underflow); fires with the exact rank when one rank contributes zeros.
#include <gtest/gtest.h>

#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr const char* kCause = "zero_grad_rank";

Spec zeroed_buffer(int rank, int64_t from) {
  Spec sp;
  sp.world = 4;
  sp.local_grad_scale = [rank, from](int64_t step, int r) { return r == rank && step >= from ? 0.0 : 1.0; };
  return sp;
}

// --- 1. warm-up ----------------------------------------------------------------------------------
TEST(ZeroGradRankDetector, SilentAtTheStartAndDuringInitialScaleSearch) {
  Spec sp;
  sp.world = 4;
  sp.steps = 20;
  sp.fp16 = true;
  sp.initial_overflows = 3;  // local grad norms inf on every rank: not judged
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 4);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::pass);
  EXPECT_EQ(d->check().detail, "20 steps compared across 4 ranks, no rank with zero gradients");
}

// --- 2. healthy noise and look-alikes -------------------------------------------------------------
TEST(ZeroGradRankDetector, SilentOnHealthyNoise) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.world = 4;
    auto d = run_detector(kCause, interleave(generate(sp), Order::chunked, seed), 4);
    EXPECT_FALSE(d->finding()) << "seed " << seed;
    EXPECT_EQ(d->check().state, CheckState::pass);
  }
}

TEST(ZeroGradRankDetector, SilentOnOneRankWithMerelySmallGrads) {
  for (double small : {1e-3, 1e-6, 1e-10}) {
    Spec sp;
    sp.world = 4;
    sp.local_grad_scale = [small](int64_t step, int r) { return r == 1 && step >= 100 ? small : 1.0; };
    EXPECT_FALSE(run_finding(kCause, sp, Order::by_time, 4)) << small;
  }
}

TEST(ZeroGradRankDetector, SilentWhenAllRanksAreZero) {
  Spec sp;
  sp.world = 4;
  sp.fp16 = true;
  sp.max_scale = [](int64_t step) { return step >= 150 ? 1.0 / 256 : 1e30; };  // every rank underflows
  EXPECT_FALSE(run_finding(kCause, sp, Order::by_time, 4));
}

TEST(ZeroGradRankDetector, NotApplicableOnASingleRank) {
  Spec sp;
  sp.world = 1;
  sp.local_grad_scale = [](int64_t step, int) { return step >= 100 ? 0.0 : 1.0; };
  for (int world : {1, 0}) {
    auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), world);
    EXPECT_FALSE(d->finding());
    EXPECT_EQ(d->check().state, CheckState::pass);
    EXPECT_EQ(d->check().detail, "single rank: not applicable");
  }
}

// --- 3. injected faults ---------------------------------------------------------------------------
TEST(ZeroGradRankDetector, FiresOnZeroedBufferWithTheExactRank) {
  for (int rank = 0; rank < 4; ++rank) {
    auto rs = generate(zeroed_buffer(rank, 150));
    auto f = run_detector(kCause, interleave(rs, Order::by_time), 4)->finding();
    ASSERT_TRUE(f) << rank;
    EXPECT_EQ(f->rank, rank);
    EXPECT_EQ(f->onset_step, 150);
    EXPECT_EQ(f->detected_step, 151);
    double t = 0;  // the step is complete when its last rank reports it
    for (const auto& r : rs[3])
      if (r.kind == RecordKind::step && r.step == 151) t = r.t;
    EXPECT_DOUBLE_EQ(f->detected_t, t);
    EXPECT_NE(f->evidence[0].find("rank " + std::to_string(rank) + " local grad norm 0 at steps 150..151"),
              std::string::npos)
        << f->evidence[0];
    EXPECT_DOUBLE_EQ(f->confidence, 0.95);
  }
}

TEST(ZeroGradRankDetector, FiresOnTwoRanks) {
  Spec sp;  // 2 ranks: rank 1 skips backward from step 80
  sp.local_grad_scale = [](int64_t step, int r) { return r == 1 && step >= 80 ? 0.0 : 1.0; };
  auto f = run_finding(kCause, sp, Order::by_time, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->onset_step, 80);
  EXPECT_EQ(f->detected_step, 81);
}

TEST(ZeroGradRankDetector, OneZeroStepIsNotEnough) {
  Spec sp;
  sp.world = 4;
  sp.local_grad_scale = [](int64_t step, int r) { return r == 2 && (step == 100 || step == 102) ? 0.0 : 1.0; };
  EXPECT_FALSE(run_finding(kCause, sp, Order::by_time, 4));
}

TEST(ZeroGradRankDetector, RestartReemittedStepsPairUp) {
  Spec sp = zeroed_buffer(3, 320);
  sp.steps = 400;
  sp.checkpoint_at = {300};
  sp.restart_after = 350;
  sp.restart_from = 300;
  auto f = run_finding(kCause, sp, Order::by_time, 4);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->onset_step, 320);
  EXPECT_EQ(f->detected_step, 321);
}

TEST(ZeroGradRankDetector, FaultOnlyAfterRestartFoundInAnyOrder) {
  Spec sp;
  sp.world = 4;
  sp.steps = 400;
  sp.checkpoint_at = {300};
  sp.restart_after = 350;
  sp.restart_from = 300;
  auto rs = generate(sp);
  bool resumed = false;  // rank 3's resumed process zeroes its buffer from step 320
  for (auto& r : rs[3]) {
    resumed |= r.name == "resume";
    if (resumed && r.kind == RecordKind::step && r.step >= 320) r.local_grad_norm = 0.0;
  }
  for (auto o : {Order::by_time, Order::rank_first, Order::reversed, Order::chunked}) {
    auto f = run_detector(kCause, interleave(rs, o), 4)->finding();
    ASSERT_TRUE(f) << static_cast<int>(o);
    EXPECT_EQ(f->rank, 3);
    EXPECT_EQ(f->onset_step, 320);
    EXPECT_EQ(f->detected_step, 321);
  }
}

TEST(ZeroGradRankDetector, CannotRunWithoutLocalGradNorm) {
  Spec sp;
  sp.local_grad = false;
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::cannot_run);
  EXPECT_EQ(d->check().detail, "missing local_grad_norm: log each rank's grad norm before the all-reduce");
}

TEST(ZeroGradRankDetector, SameFindingWhateverTheInterleaving) {
  auto rs = generate(zeroed_buffer(2, 150));
  auto ref = run_detector(kCause, interleave(rs, Order::by_time), 4)->finding();
  ASSERT_TRUE(ref);
  for (auto o : {Order::round_robin, Order::rank_first, Order::reversed, Order::chunked}) {
    auto f = run_detector(kCause, interleave(rs, o), 4)->finding();
    ASSERT_TRUE(f);
    EXPECT_TRUE(same_finding(*ref, *f)) << static_cast<int>(o);
  }
  // Without world_size: orders that show every rank early.
  for (auto o : {Order::round_robin, Order::reversed, Order::chunked}) {
    auto f = run_detector(kCause, interleave(rs, o), 0)->finding();
    ASSERT_TRUE(f);
    EXPECT_TRUE(same_finding(*ref, *f)) << static_cast<int>(o);
  }
}

TEST(ZeroGradRankDetector, OddDataDoesNotThrow) {
  auto d = make_detector(kCause, {3});
  Record r;
  for (int i = 0; i < 60; ++i) {
    r.rank = i % 5 - 1;  // includes -1 and ranks beyond world_size
    r.step = i % 4 ? i / 5 : 3;
    r.local_grad_norm = i % 3 ? 0.0 : (i % 2 ? std::nan("") : -1.0);
    r.t = i % 2 ? std::nan("") : 10.0 - i;
    EXPECT_NO_THROW(d->observe(r));
  }
  EXPECT_NO_THROW(d->check());
}

}  // namespace
}  // namespace flatline::testing
