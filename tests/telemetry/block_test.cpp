// StepBlock (telemetry/block.h): records into columns and back give the same stream, field for field
// (absent stays absent, a logged NaN stays a NaN); heartbeats fold into a run only when they are the
// watchdog's next beat exactly, so nothing a record said is lost; and seal() says what every row shares.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "telemetry/block.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace {

Record step_rec(int rank, int64_t step, double t) {
  Record r;
  r.kind = RecordKind::step;
  r.rank = rank;
  r.step = step;
  r.t = t;
  return r;
}

Record beat(int rank, int64_t step, double t, const std::string& phase) {
  Record r;
  r.kind = RecordKind::heartbeat;
  r.rank = rank;
  r.step = step;
  r.t = t;
  r.phase = phase;
  return r;
}

std::vector<std::string> lines(const std::vector<Record>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(to_json(r));
  return out;
}

TEST(StepBlock, RecordsComeBackAsTheyWent) {
  std::vector<Record> in;
  Record a = step_rec(0, 7, 1.25);
  a.opt_step = 6, a.loss = 2.5, a.lr = 3e-4, a.overflow = false, a.skipped = true, a.batch_hash = 0xabcdefULL;
  a.local_grad_norm = std::nan("");  // logged as NaN: not the same as absent
  Record b = step_rec(3, 7, std::nan(""));
  b.loss_avg = 2.4, b.loss_scale = 65536, b.epoch = 2, b.samples_seen = 900, b.step_ms = 300, b.comm_ms = 12;
  b.param_mismatches = 0, b.grad_zero_frac = 0, b.param_norm = 9, b.update_norm = 0.1, b.grad_norm = 1;
  in.push_back(beat(0, 7, 0.5, "data"));
  in.push_back(a);
  in.push_back(beat(3, 7, 1.0, "collective"));
  in.push_back(beat(3, 7, 1.5, "collective"));
  in.push_back(beat(3, 7, 2.0, "odd-phase"));
  in.push_back(b);
  in.push_back(beat(1, 8, 2.5, "compute"));
  StepBlock blk;
  for (const auto& r : in) ASSERT_TRUE(blk.append(r));
  blk.seal();
  std::vector<Record> out;
  blk.for_each_record([&](const Record& r) { out.push_back(r); });
  EXPECT_EQ(lines(out), lines(in));
  EXPECT_EQ(blk.rows(), 2u);
  EXPECT_EQ(blk.records(), in.size());
  EXPECT_TRUE(std::isnan(blk.local_grad_norm[0]));
  EXPECT_TRUE(blk.flags[0] & StepBlock::kLocalGradNorm);
  EXPECT_FALSE(blk.flags[1] & StepBlock::kLocalGradNorm);
  EXPECT_TRUE(blk.skipped(0));
  EXPECT_FALSE(blk.overflow(0));
  EXPECT_TRUE(blk.flags[0] & StepBlock::kOverflow);
  EXPECT_FALSE(blk.lockstep);  // rank 3 on row 1
  EXPECT_EQ(blk.all_has, 0u);  // no field on both rows
  EXPECT_EQ(blk.t_max, 1.25);
}

TEST(StepBlock, HeartbeatsFoldOnlyWhenEachIsThePreviousPlusTheInterval) {
  StepBlock blk;
  double t = 10.0;
  for (int k = 0; k < 5; ++k, t += 0.1) blk.append(beat(2, 4, t, "compute"));  // t += 0.1: the watchdog's
  blk.append(beat(2, 4, t + 1e-9, "compute"));  // not the next beat exactly: a run of its own
  blk.append(beat(1, 4, t + 0.1, "compute"));   // another rank
  ASSERT_EQ(blk.beats.size(), 3u);
  EXPECT_EQ(blk.beats[0].n, 5);
  EXPECT_EQ(blk.beats[1].n, 1);
  std::vector<double> ts;
  blk.for_each_record([&](const Record& r) {
    if (r.rank == 2) ts.push_back(r.t);
  });
  ASSERT_EQ(ts.size(), 6u);
  double want = 10.0;
  for (int k = 0; k < 5; ++k, want += 0.1) EXPECT_EQ(ts[static_cast<size_t>(k)], want);
  EXPECT_EQ(ts[5], t + 1e-9);
}

TEST(StepBlock, LockstepIsRanksInOrderAtOneStepWithATime) {
  StepBlock blk;
  for (int r = 0; r < 4; ++r) blk.append(step_rec(r, 9, 1.0 + r));
  blk.seal();
  EXPECT_TRUE(blk.lockstep);
  EXPECT_EQ(blk.t_max, 4.0);
  blk.t[2] = std::nan("");
  blk.seal();
  EXPECT_FALSE(blk.lockstep);
  blk.t[2] = 3.0;
  blk.step[3] = 8;
  blk.seal();
  EXPECT_FALSE(blk.lockstep);
  StepBlock none;
  none.append(beat(0, 1, 0.5, "data"));
  EXPECT_FALSE(none.append(Record{RecordKind::event}));  // events are not part of a block
  none.seal();
  EXPECT_FALSE(none.lockstep);
  EXPECT_TRUE(std::isnan(none.t_max));
}

}  // namespace
}  // namespace flatline
