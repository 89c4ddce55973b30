// The drill's views and checklist walk on hand-written summaries: the exact per-rank tables of a small
// world, the ranges and named outlier ranks of a 40-rank one, the batches after a restart, and the
// reading of each check (in, out, cannot tell) with what it showed.
#include <gtest/gtest.h>

#include "report/checklist_walk.h"
#include "report/drill_views.h"
#include "tests/report/summary_fixtures.h"

namespace flatline {
namespace {

std::string after_plot(const std::string& view) { return view.substr(view.find("\n\n") + 2); }

TEST(DrillViews, ASmallWorldGetsOneRowPerRank) {
  const RunSummary s = testing::summarise(testing::two_rank_records(), 2);
  EXPECT_EQ(after_plot(alive_view(s)),
            "rank   max step    reached t  last step t           last heartbeat      longest gap\n"
            "0             5        12.00        14.00   t=14.50 step 5 compute        6.00 s @3\n"
            "1             4         4.00         4.00 t=4.20 step 4 collective        1.00 s @2\n"
            "rank 0: logged step 5 repeated by 3 step records (t=12.00..14.00 s)\n"
            "rank 0: run_end at t=15.00 s\n"
            "rank 1: error at t=30.00 s: Timed out waiting 20000ms\n");
  EXPECT_NE(alive_view(s).find("   * heartbeats   o rank 0\n"), std::string::npos);
  EXPECT_EQ(after_plot(ranks_view(s)),
            "rank  median (last 20)           mean (all)  zero steps  first zero\n"
            "0                    1                 1.01           0           -\n"
            "1                    1                 1.12           2           3\n");
  EXPECT_EQ(data_view(s),
            "batch fingerprints (batch_hash per step) of every rank (2)\n"
            "rank 0: 9 batches hashed, 7 distinct, 1 repeat(s) of an earlier step, 1 re-run(s) of the same step\n"
            "    steps 4..4 (1 batches) repeat batches first trained at steps 1..1\n"
            "rank 1: 4 batches hashed, 4 distinct, 0 repeat(s) of an earlier step, 0 re-run(s) of the same step\n"
            "after the restart (resume from checkpoint step 2 at t=9.00 s), rank 0's next batches:\n"
            "    step 3: batch 000000000000000e, the same batch as its first run (a re-run)\n"
            "    step 4: batch 000000000000000a, first trained at step 1 (a REPEAT)\n"
            "    step 5: batch 0000000000000003, new\n"
            "    step 5: batch 0000000000000004, new\n"
            "    step 5: batch 0000000000000005, new\n");
  EXPECT_EQ(scale_view(s), "no loss_scale logged\n");
  EXPECT_EQ(eval_view(s), "no eval records (eval not enabled in this run)\n");
  EXPECT_EQ(signal_view(s, "bogus"), "");
  const Series lr = summary_series(s, "lr");
  EXPECT_EQ(lr.x, (std::vector<double>{1, 2, 3, 4, 3, 4, 5, 5, 5}));  // record order: the restart goes back
}

TEST(DrillViews, AFleetGetsRangesAndTheRanksThatStandOut) {
  const RunSummary s = testing::fleet_summary();
  EXPECT_EQ(after_plot(alive_view(s)),
            "40 of 40 ranks wrote telemetry; the run's last record at t=80.00 s\n"
            "max logged step:   100 on every rank\n"
            "reached at:        t=50.00 s\n"
            "last step record:  t=50.00 s\n"
            "longest gap between step records: 0.50 s (the longest: 0.50 s before step 2 on rank 0)\n"
            "last heartbeat:    t=60.00 s\n"
            "  its step:        101 on every rank\n"
            "  its phase:       collective on 39 ranks; compute on rank 21\n"
            "one logged step repeated (3+ records, t advancing): never on every rank\n"
            "errors:            \"Timed out waiting 600000ms for recv operation to complete\" on 39 ranks; none on rank 21\n"
            "  first error at:  t=80.00 s\n"
            "end of run:        no run_end on every rank\n");
  EXPECT_EQ(after_plot(ranks_view(s)),
            "median of each rank's last 20 local grad norms: 0..1.39 across 40 ranks (median 1.19)\n"
            "zero steps (local grad norm <= 1e-12): none on 39 ranks; 50 from step 51 (every step since) on rank 7\n"
            "  rank 7: median 0 (x0 of the ranks' median), zero steps 50 from step 51 (every step since)\n"
            "compute per step (step_ms - comm_ms, mean): 70.0..95.0 ms (median 70.0); slowest: rank 13 95.0 ms "
            "(+36%), rank 39 70.0 ms (+0%), rank 38 70.0 ms (+0%)\n");
  EXPECT_NE(ranks_view(s).find("* max   o mean   + min over ranks"), std::string::npos);
  EXPECT_EQ(data_view(s),
            "batch fingerprints (batch_hash per step) of 16 of 40 ranks, spread evenly: 0, 3, 5, 8, 10, 13, 16, 18, "
            "21, 23, 26, 29, 31, 34, 36, 39\n"
            "every tracked rank: 100 batches hashed, 100 distinct, 0 repeat(s) of an earlier step, 0 re-run(s) of "
            "the same step\n");
}

TEST(DrillViews, GroupsAndRankLists) {
  EXPECT_EQ(group_ranks({{"a", 1}, {"b", 2}, {"a", 3}}, 3), "a on ranks 1, 3; b on rank 2");
  EXPECT_EQ(group_ranks({{"x", 0}, {"x", 1}}, 2), "x on every rank");
  EXPECT_EQ(rank_list({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), "1, 2, 3, 4, 5, 6, 7, 8 (+2 more)");
  EXPECT_EQ(shorten("Timed out waiting", 12), "Timed out...");
  EXPECT_EQ(shorten("short", 12), "short");
  std::vector<std::pair<std::string, int>> many;
  for (int r = 0; r < 20; ++r) many.emplace_back(r < 11 ? "p" : "q", r);
  EXPECT_EQ(group_ranks(many, 20), "p on 11 ranks; q on ranks 11, 12, 13, 14, 15, 16, 17, 18 (+1 more)");
}

TEST(ChecklistWalk, EachCheckOnTheTwoRankRun) {
  const auto w = walk_checklist(testing::summarise(testing::two_rank_records(), 2));
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w[0].cause, "run_not_alive");
  EXPECT_EQ(w[0].signal, "alive");
  EXPECT_EQ(w[0].reading, Reading::rules_in);
  EXPECT_NE(w[0].showed.find("logged step 5 repeated by 3 records from t=12.0 to t=14.0 s on 1 rank(s)"),
            std::string::npos) << w[0].showed;
  EXPECT_NE(w[0].showed.find("errors: \"Timed out waiting 20000ms\" on rank 1"), std::string::npos) << w[0].showed;
  EXPECT_NE(w[0].why.find("stale step"), std::string::npos);
  EXPECT_EQ(w[1].reading, Reading::rules_out);
  EXPECT_EQ(w[1].showed, "peak lr 0.001 at step 1; last lr 0.001 at step 5 (100% of the peak)");
  EXPECT_EQ(w[2].reading, Reading::rules_out);  // one repeat alone is not a replay
  EXPECT_EQ(w[2].why.substr(0, 47), "1 isolated repeat(s), never two in a row: one b");
  EXPECT_EQ(w[3].reading, Reading::rules_out);
  EXPECT_EQ(w[3].showed, "loss scale 1 throughout, no overflow");
  EXPECT_EQ(w[4].reading, Reading::rules_in);
  EXPECT_EQ(w[4].ranks, (std::vector<int>{1}));
  int rank = -2;
  EXPECT_EQ(walk_verdict(w, &rank), "run_not_alive");  // liveness first: a stale logger makes the rest moot
  EXPECT_EQ(rank, -1);
}

TEST(ChecklistWalk, TheFleetRunNamesTheHangAndTheZeroRank) {
  const auto w = walk_checklist(testing::fleet_summary());
  EXPECT_EQ(w[0].reading, Reading::rules_in);
  EXPECT_NE(w[0].showed.find("40 rank(s) stopped, their last heartbeat's phase: collective on 39 ranks; compute on "
                             "rank 21; errors: \"Timed out waiting 600000ms for recv operation to complete\" on 39 "
                             "ranks"),
            std::string::npos)
      << w[0].showed;
  EXPECT_EQ(w[4].reading, Reading::rules_in);
  EXPECT_EQ(w[4].ranks, (std::vector<int>{7}));
  EXPECT_EQ(w[4].showed, "40 ranks; median of their last local grad norms 1.2; rank 7: 0 from step 51 (50 zero steps)");
  std::vector<CheckWalk> later(w.begin() + 1, w.end());
  int rank = -1;
  EXPECT_EQ(walk_verdict(later, &rank), "zero_grad_rank");
  EXPECT_EQ(rank, 7);
}

TEST(ChecklistWalk, WhatALogCannotTell) {
  RunSummary s(1);
  Record r;  // one rank, no t, no lr, no hash, no local norm
  r.loss = 2;
  s.write(r);
  const auto w = walk_checklist(s);
  EXPECT_EQ(w[0].reading, Reading::cannot_tell);
  EXPECT_EQ(w[1].reading, Reading::cannot_tell);
  EXPECT_EQ(w[2].reading, Reading::cannot_tell);
  EXPECT_EQ(w[2].why, "cannot tell: log a hash of each batch's sample ids");
  EXPECT_EQ(w[3].reading, Reading::rules_out);
  EXPECT_EQ(w[4].reading, Reading::cannot_tell);
  EXPECT_EQ(walk_verdict(w), "healthy");
}

TEST(ChecklistWalk, TheExplanationPutsTheDetectorsBesideEachCheck) {
  Diagnosis d;
  d.cause = "zero_grad_rank", d.rank = 7;
  d.checklist = {{"run_not_alive", CheckState::pass, "steps advancing"}, {"zero_grad_rank", CheckState::fail, "rank 7"}};
  d.plateau.detail = "loss flat";
  const std::string t = explain_text(walk_checklist(testing::fleet_summary()), d, "run_not_alive");
  EXPECT_NE(t.find("1. `alive` -> run_not_alive: step vs wall clock, heartbeats\n   on this run: "), std::string::npos) << t;
  EXPECT_NE(t.find("   rules it IN: step records stopped 10+ s before the end"), std::string::npos) << t;
  EXPECT_NE(t.find("   the detectors: pass (steps advancing)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("   the detectors: FAIL (rank 7)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("walk: the first check that rules its cause in names it: run_not_alive\n"
                   "the detectors: zero_grad_rank on rank 7; the truth: run_not_alive\nplateau check: loss flat\n"),
            std::string::npos)
      << t;
}

}  // namespace
}  // namespace flatline
