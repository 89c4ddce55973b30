// RunSummary on hand-written records (exact liveness, local-norm, fingerprint and event bookkeeping), on
// generated streams (any interleaving of ranks gives the same summary), and its bounded heartbeat sample.
#include <gtest/gtest.h>

#include <algorithm>

#include "report/run_summary.h"
#include "tests/detectors/stream.h"
#include "tests/report/summary_fixtures.h"

namespace flatline {
namespace {

using testing::event_rec;
using testing::heartbeat_rec;
using testing::step_rec;

std::vector<Record> run() { return testing::two_rank_records(); }

TEST(RunSummary, LivenessPerRank) {
  RunSummary s(2);
  for (const auto& r : run()) s.write(r);
  s.end(0);
  ASSERT_EQ(s.world(), 2);
  const auto& r0 = s.ranks()[0];
  EXPECT_EQ(r0.step_records, 9);
  EXPECT_EQ(r0.max_step, 5);
  EXPECT_EQ(r0.reached_t, 12);
  EXPECT_EQ(r0.last_step_t, 14);
  EXPECT_EQ(r0.longest_gap_s, 6);      // t=4 -> t=10 across the restart
  EXPECT_EQ(r0.gap_before_step, 3);
  EXPECT_EQ(r0.stuck_records, 3);      // step 5 at t = 12, 13, 14
  EXPECT_EQ(r0.stuck_step, 5);
  EXPECT_EQ(r0.stuck_from_t, 12);
  EXPECT_EQ(r0.stuck_to_t, 14);
  EXPECT_EQ(r0.hb_phase, "compute");
  EXPECT_EQ(r0.run_end_t, 15);
  EXPECT_EQ(r0.errors, 0);
  const auto& r1 = s.ranks()[1];
  EXPECT_EQ(r1.max_step, 4);
  EXPECT_EQ(r1.stuck_records, 0);
  EXPECT_EQ(r1.errors, 1);
  EXPECT_EQ(r1.error_detail, "Timed out waiting 20000ms");
  EXPECT_EQ(r1.hb_step, 4);
  EXPECT_EQ(s.t_end(), 30);
  EXPECT_EQ(s.last_step(), 5);
  EXPECT_EQ(s.records(), 21);
  EXPECT_EQ(s.heartbeats(), 2);
}

TEST(RunSummary, LocalNormsAcrossRanksAndTimes) {
  RunSummary s(2);
  for (const auto& r : run()) s.write(r);
  const auto& r1 = s.ranks()[1];
  EXPECT_EQ(r1.zero_norms, 2);
  EXPECT_EQ(r1.first_zero_step, 3);
  EXPECT_EQ(r1.last_nonzero_step, 2);
  EXPECT_EQ(r1.window(), (std::vector<double>{2.0, 2.5, 0.0, 0.0}));
  EXPECT_EQ(r1.compute_ms_sum / r1.timed, 90);
  ASSERT_EQ(s.across().size(), 9u);  // rank 0's 9 step records; rank 1 reported the first 4
  EXPECT_EQ(s.across()[2].min, 0.0);
  EXPECT_EQ(s.across()[2].max, 1.2);
  EXPECT_EQ(s.across()[2].zeros, 1);
  EXPECT_EQ(s.across()[2].n, 2);
  EXPECT_EQ(s.across()[5].step, 4);  // the re-run's ordinal carries its own logged step
  EXPECT_EQ(s.across()[5].n, 1);
  EXPECT_TRUE(s.has_local_norm() && s.has_timing() && s.has_batch_hash());
}

TEST(RunSummary, FingerprintsRepeatsRerunsAndTheBatchesAfterAResume) {
  RunSummary s(2);
  for (const auto& r : run()) s.write(r);
  s.end(0);
  ASSERT_EQ(s.tracked().size(), 2u);  // a world of 2: every rank
  const auto& t0 = s.tracked()[0];
  EXPECT_EQ(t0.rank, 0);
  EXPECT_EQ(t0.hashed, 9);
  EXPECT_EQ(t0.first_seen.size(), 7u);
  EXPECT_EQ(t0.reruns, 1);   // step 3 again with 0xe
  EXPECT_EQ(t0.repeats, 1);  // step 4 with step 1's batch
  ASSERT_EQ(t0.first_stretches.size(), 1u);
  EXPECT_EQ(t0.first_stretches[0].from_step, 4);
  EXPECT_EQ(t0.first_stretches[0].src_lo, 1);
  ASSERT_EQ(t0.after_resume.size(), 1u);
  ASSERT_EQ(t0.after_resume[0].size(), 5u);  // the 5 hashed records after it (kAfterResume: 6)
  EXPECT_EQ(t0.after_resume[0][0].step, 3);
  EXPECT_EQ(t0.after_resume[0][0].first_step, 3);
  EXPECT_EQ(t0.after_resume[0][1].first_step, 1);
  EXPECT_EQ(t0.after_resume[0][2].first_step, -1);
  EXPECT_EQ(s.tracked()[1].repeats, 0);
  // the series rank's events (checkpoint saves counted) and its rows
  std::vector<std::string> names;
  for (const auto& e : s.events()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"run_start", "stop_for_restart", "resume", "run_end"}));
  EXPECT_EQ(s.checkpoints(), 1);
  EXPECT_EQ(s.restarts(), 1);
  ASSERT_EQ(s.rows().size(), 9u);
  EXPECT_EQ(s.rows()[5].step, 4);
  EXPECT_DOUBLE_EQ(s.rows()[5].loss, 2.6);
  EXPECT_EQ(s.rows()[5].skipped, -1);  // not logged
}

TEST(RunSummary, ALowerRankReplacesTheSeriesAndAFleetTracksSixteenRanksSpreadEvenly) {
  RunSummary s;  // world unknown
  s.write(step_rec(3, 1, 1, 0xa, 1));
  s.write(step_rec(3, 2, 2, 0xb, 1));
  EXPECT_EQ(s.series_rank(), 3);
  s.write(step_rec(1, 1, 1, 0xc, 1));
  EXPECT_EQ(s.series_rank(), 1);
  EXPECT_EQ(s.rows().size(), 1u);
  RunSummary fleet(1024);
  std::vector<int> ranks;
  for (const auto& t : fleet.tracked()) ranks.push_back(t.rank);
  EXPECT_EQ(ranks, (std::vector<int>{0, 68, 136, 205, 273, 341, 409, 477, 546, 614, 682, 750, 818, 887, 955, 1023}));
}

TEST(RunSummary, AnyInterleavingOfRanksGivesTheSameSummary) {
  testing::Spec sp;
  sp.world = 4, sp.steps = 120, sp.seed = 3, sp.checkpoint_at = {50}, sp.restart_after = 70, sp.restart_from = 50;
  sp.batch_index = [](int64_t step, bool after) { return after ? step - 40 : step - 1; };
  const auto ranks = testing::generate(sp);
  RunSummary by_rank(4), by_time(4);
  std::vector<Record> all;
  for (const auto& r : ranks)
    for (const auto& rec : r) by_rank.write(rec), all.push_back(rec);
  std::stable_sort(all.begin(), all.end(), [](const Record& a, const Record& b) { return a.t < b.t; });
  for (const auto& rec : all) by_time.write(rec);
  ASSERT_EQ(by_rank.rows().size(), by_time.rows().size());
  for (size_t i = 0; i < by_rank.rows().size(); ++i) EXPECT_EQ(by_rank.rows()[i].step, by_time.rows()[i].step);
  for (int r = 0; r < 4; ++r) {
    const auto &a = by_rank.ranks()[r], &b = by_time.ranks()[r];
    EXPECT_EQ(a.max_step, b.max_step);
    EXPECT_EQ(a.longest_gap_s, b.longest_gap_s);
    EXPECT_EQ(a.window(), b.window());
    EXPECT_EQ(by_rank.tracked()[r].repeats, by_time.tracked()[r].repeats);
  }
  EXPECT_GT(by_rank.tracked()[0].repeats, 0);
  EXPECT_EQ(by_rank.across().size(), by_time.across().size());
  EXPECT_EQ(by_rank.across()[60].sum, by_time.across()[60].sum);
}

TEST(RunSummary, TheHeartbeatSampleStaysBoundedAndSpread) {
  RunSummary s(1);
  const int n = 100000;
  for (int i = 0; i < n; ++i) s.write(heartbeat_rec(0, i, i, "compute"));
  const auto& h = s.heartbeat_sample();
  EXPECT_LT(h.size(), RunSummary::kHeartbeatSample);
  EXPECT_GE(h.size(), RunSummary::kHeartbeatSample / 2 - 1);
  EXPECT_EQ(h.front().first, 0);
  EXPECT_GT(h.back().first, n - 64);  // the stride at the end is 32
  EXPECT_EQ(s.heartbeats(), n);
}

}  // namespace
}  // namespace flatline
