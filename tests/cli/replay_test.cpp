// Replay: recorded telemetry through the Triage in recorded order gives the diagnosis of a post-hoc
// diagnose; findings are announced once, as they fire; checklist lines as they change; pacing sleeps
// for the recorded time divided by the speed.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

TEST(Replay, SameDiagnosisAsDiagnoseAndFindingsAsTheyFire) {
  LogData log = read_log(logs("flatline/zero_grad_rank"));
  std::vector<Finding> fired;
  std::vector<std::pair<std::string, int64_t>> changes;
  ReplayOptions o;
  o.on_finding = [&](const Finding& f) { fired.push_back(f); };
  o.on_check = [&](const CheckResult& c, int64_t step) {
    changes.push_back({c.cause + " " + to_string(c.state), step});
  };
  Diagnosis live = replay(log, o);
  Diagnosis post = diagnose(logs("flatline/zero_grad_rank"));
  EXPECT_EQ(to_json(live), to_json(post));
  EXPECT_EQ(live.cause, "zero_grad_rank");
  EXPECT_EQ(live.rank, 1);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].cause, "zero_grad_rank");
  EXPECT_EQ(fired[0].detected_step, 301);
  // Every check leaves pending on the first step record; zero_grad_rank turns to FAIL at step 301.
  ASSERT_GE(changes.size(), 6u);
  EXPECT_EQ(changes[0], std::make_pair(std::string("run_not_alive pass"), int64_t{1}));
  EXPECT_EQ(changes.back(), std::make_pair(std::string("zero_grad_rank fail"), int64_t{301}));
}

TEST(Replay, RanksMergedByTimeStable) {
  LogData log = read_log(logs("flatline/healthy"));
  ASSERT_EQ(log.world_size, 2);
  // rank 0 writes at t = 0.1 s, rank 1 at t + 1 ms: the merged stream alternates 0, 1, 0, 1, ...
  EXPECT_EQ(log.records[0].rank, 0);
  EXPECT_EQ(log.records[1].rank, 1);
  EXPECT_EQ(log.records[0].step, 1);
  EXPECT_EQ(log.records[1].step, 1);
  for (size_t i = 1; i < log.records.size(); ++i) ASSERT_LE(log.records[i - 1].t, log.records[i].t) << i;
}

TEST(Replay, RealtimePacingSleepsRecordedTimeOverSpeed) {
  LogData log = read_log(logs("wandb/lr_zero.csv"));  // t = _runtime: 0.5 s .. 300 s
  double slept = 0;
  int sleeps = 0;
  ReplayOptions o;
  o.realtime = true;
  o.speed = 100;
  o.sleep = [&](double s) {
    slept += s;
    ++sleeps;
  };
  Diagnosis d = replay(log, o);
  EXPECT_NEAR(slept, (300.0 - 0.5) / 100, 1e-9);
  EXPECT_EQ(sleeps, 60);
  EXPECT_EQ(d.cause, "lr_zero");
  EXPECT_EQ(d.detected_step, 410);
}

TEST(Replay, LogsWithoutTimeAreNotPaced) {
  int sleeps = 0;
  ReplayOptions o;
  o.realtime = true;
  o.sleep = [&](double) { ++sleeps; };
  EXPECT_EQ(replay(read_log(logs("hf/lr_zero")), o).cause, "lr_zero");
  EXPECT_EQ(sleeps, 0);
}

}  // namespace
}  // namespace flatline::testing
