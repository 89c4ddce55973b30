// straggler (a fleet finding after the checklist): silent on a few steps of scheduler jitter and on
// healthy noise; fires with the slow rank's number once it is slow for 10 steps in a row.
#include <gtest/gtest.h>

#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr const char* kCause = "straggler";

// Rank `slow` computes 40% longer on steps [from, to); the others wait for it inside the all-reduce.
Spec slow_rank(int slow, int64_t from, int64_t to) {
  Spec sp;
  sp.world = 4;
  sp.mutate = [=](Record& r) {
    if (!r.step_ms || !r.comm_ms) return;
    const double compute = *r.step_ms - *r.comm_ms, extra = r.step >= from && r.step < to ? 0.4 * compute : 0.0;
    if (r.rank == slow) r.step_ms = *r.step_ms + extra;
    else r.comm_ms = *r.comm_ms + extra, r.step_ms = *r.step_ms + extra;
  };
  return sp;
}

TEST(StragglerDetector, SilentOnHealthyNoise) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Spec sp;
    sp.world = 4;
    sp.seed = seed;
    auto d = run_detector(kCause, interleave(generate(sp), Order::chunked, seed), 4);
    EXPECT_FALSE(d->finding()) << "seed " << seed;
    EXPECT_EQ(d->check().state, CheckState::pass);
  }
}

TEST(StragglerDetector, SilentOnAFewStepsOfSchedulerJitter) {
  EXPECT_FALSE(run_finding(kCause, slow_rank(1, 100, 105), Order::by_time, 4));
  EXPECT_FALSE(run_finding(kCause, slow_rank(1, 100, 109), Order::by_time, 4));  // 9 steps: one short
}

TEST(StragglerDetector, NamesTheSlowRankAfterTenSteps) {
  auto f = run_finding(kCause, slow_rank(2, 100, 400), Order::by_time, 4);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->onset_step, 100);
  EXPECT_EQ(f->detected_step, 109);
  auto g = run_finding(kCause, slow_rank(2, 100, 400), Order::reversed, 4);
  ASSERT_TRUE(g);
  EXPECT_TRUE(same_finding(*f, *g));
}

}  // namespace
}  // namespace flatline::testing
