// Signals computed from a hand-written two-rank run: series extraction and the step rate (the report's
// plots). The drill's tables: tests/report/drill_views_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "report/signals.h"

namespace flatline {
namespace {

Record step(int rank, int64_t s, double t, uint64_t hash, double local, double lr = 1e-3) {
  Record r;
  r.rank = rank, r.step = s, r.t = t, r.batch_hash = hash, r.local_grad_norm = local, r.lr = lr;
  r.loss = 3.0 - 0.1 * static_cast<double>(s);
  r.loss_scale = 1024.0 / static_cast<double>(1 << s);
  r.skipped = r.overflow = s >= 2;
  return r;
}

Record other(RecordKind k, int rank, int64_t s, double t, const std::string& what) {
  Record r;
  r.kind = k, r.rank = rank, r.step = s, r.t = t;
  (k == RecordKind::heartbeat ? r.phase : r.name) = what;
  if (k == RecordKind::event) r.detail = "collective timed out";
  if (k == RecordKind::eval) r.eval_loss = 2.5;
  return r;
}

RunData two_ranks() {
  Record rerun = step(0, 2, 3.5, 0xb, 2.0);  // step 2 trained again after a restart, not skipped this time
  rerun.skipped = rerun.overflow = false;
  RunData d;
  d.ranks.push_back({step(0, 1, 1, 0xa, 1.0), step(0, 2, 2, 0xb, 2.0), step(0, 3, 3, 0xa, 3.0), rerun, other(RecordKind::eval, 0, 2, 3.6, ""),
                     other(RecordKind::heartbeat, 0, 3, 5, "collective"), other(RecordKind::event, 0, 3, 6, "error")});
  d.ranks.push_back({step(1, 1, 1, 0xc, 0.0), step(1, 2, 2, 0xd, 0.0), other(RecordKind::heartbeat, 1, 3, 4, "compute")});
  return d;
}

TEST(Signals, SeriesFromTheLowestRankWithTheField) {
  const RunData d = two_ranks();
  Series lr = step_series(d, "lr");
  EXPECT_EQ(lr.x, (std::vector<double>{1, 2, 3, 2}));  // record order: the re-run of step 2 goes back
  EXPECT_EQ(step_series(d, "local_grad_norm", 1).y, (std::vector<double>{0, 0}));
  EXPECT_TRUE(step_series(d, "grad_norm").empty());
  EXPECT_EQ(eval_loss(d).x, (std::vector<double>{2}));
  auto svt = step_vs_time(d);
  ASSERT_EQ(svt.size(), 3u);
  EXPECT_EQ(svt[0].name, "heartbeats");
  EXPECT_EQ(svt[0].x, (std::vector<double>{5, 4}));
  EXPECT_EQ(svt[2].name, "rank 1");
}

TEST(Signals, StepRateIsLoggedStepProgressPerSecond) {
  // rank 0's last record is at t = 6: bins of 2 s. Steps 1..2 by t=2, 3 by t=4 (then back to 2), none after.
  Series r = step_rate(two_ranks(), 3);
  EXPECT_EQ(r.x, (std::vector<double>{1, 3, 5}));
  EXPECT_EQ(r.y, (std::vector<double>{1.0, 0.0, 0.0}));
}

}  // namespace
}  // namespace flatline
