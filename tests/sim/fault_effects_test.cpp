// Where the faults act: every fault mode on the real trainer (2 real ranks over c10d Gloo, a tiny GPT),
// each asserting the exact effect its definition promises (faults/*.cpp, faults/effects.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "faults/fault.h"
#include "tests/sim/ranks.h"

namespace flatline::test {
namespace {

// A tiny 2-rank GPT scenario with `extra` top-level keys and one fault.
Scenario with_fault(const std::string& extra, const std::string& fault, int64_t steps = 12) {
  return load_scenario_text(R"(
name: effect
seed: 5
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}
data: {kind: text}
world_size: 2
steps: )" + std::to_string(steps) + R"(
batch_size: 2
heartbeat_s: 0.2
)" + extra + "faults:\n  - " + fault + "\nexpect: {cause: healthy}\n",
                            "<effect>");
}

std::vector<Record> steps_of(const std::string& dir, int rank) {
  std::vector<Record> out;
  for (const auto& r : read_jsonl(dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
    if (r.kind == RecordKind::step) out.push_back(r);
  return out;
}

// SGD without momentum, weight decay or clip: the update is exactly lr x the all-reduced gradient.
constexpr const char* kPlainSgd = "optimizer: {kind: sgd, lr: 0.1, grad_clip: 0}\nschedule: {kind: constant}\n";

void expect_rank1_sends_zeros_from(const std::string& dir, int64_t at) {
  const auto r0 = steps_of(dir, 0), r1 = steps_of(dir, 1);
  ASSERT_EQ(r0.size(), r1.size());
  for (size_t i = 0; i < r0.size(); ++i) {
    const int64_t s = r0[i].step;
    ASSERT_EQ(r1[i].step, s);
    if (s < at) {
      EXPECT_GT(*r1[i].local_grad_norm, 0.0) << s;
      continue;
    }
    // rank 1 sends zeros: the mean of the two local gradients is rank 0's local gradient / 2 (the halving is
    // exact in float; the two norms are summed by different passes, so they agree to float precision)
    EXPECT_EQ(*r1[i].local_grad_norm, 0.0) << s;
    EXPECT_NEAR(*r0[i].grad_norm, *r0[i].local_grad_norm / 2, 1e-6 * *r0[i].local_grad_norm) << s;
    EXPECT_NEAR(*r0[i].update_norm, 0.1 * *r0[i].grad_norm, 1e-5 * *r0[i].update_norm) << s;
    EXPECT_GT(*r1[i].loss, 0.0);  // its forward still ran
  }
}

TEST(FaultEffect, ZeroedBufferHalvesTheAllReducedGradientToRank0sOwn) {
  const std::string dir = temp_dir("zb");
  run_ranks(with_fault(kPlainSgd, "{kind: zero_grad_rank, at: 4, target: {rank: 1}, params: {mode: zeroed_buffer}}"),
            dir);
  expect_rank1_sends_zeros_from(dir, 4);
}

TEST(FaultEffect, SkippedBackwardContributesZeros) {
  const std::string dir = temp_dir("sb");
  run_ranks(with_fault(kPlainSgd, "{kind: zero_grad_rank, at: 6, target: {rank: 1}, params: {mode: skipped_backward}}"),
            dir);
  expect_rank1_sends_zeros_from(dir, 6);
}

TEST(FaultEffect, SchedulerNotSteppedKeepsLrAtZeroOnEveryRecord) {
  const std::string dir = temp_dir("sns");
  auto res = run_ranks(with_fault("schedule: {kind: cosine, warmup: 5}\n",
                                  "{kind: lr_zero, at: 1, params: {mode: scheduler_not_stepped}}"),
                       dir);
  for (int rank = 0; rank < 2; ++rank) {
    const auto recs = steps_of(dir, rank);
    ASSERT_EQ(recs.size(), 12u);
    for (const auto& r : recs) {
      EXPECT_EQ(*r.lr, 0.0) << r.step;
      EXPECT_EQ(*r.update_norm, 0.0) << r.step;  // AdamW at lr 0 moves nothing
      EXPECT_EQ(*r.param_norm, *recs.front().param_norm) << r.step;
      EXPECT_EQ(*r.opt_step, r.step);  // the optimizer steps; it just has nothing to move
    }
  }
  EXPECT_EQ(res[0].opt_steps, 12);
}

TEST(FaultEffect, ScheduleTotalTooShortReachesZeroAtTheOnsetAndStays) {
  const std::string dir = temp_dir("stts");
  const Scenario s = with_fault("schedule: {kind: cosine, warmup: 2, min_lr: 1.0e-4}\n",
                                "{kind: lr_zero, at: 8, params: {mode: schedule_total_too_short}}");
  run_ranks(s, dir);
  const auto recs = steps_of(dir, 0);
  ASSERT_EQ(recs.size(), 12u);
  EXPECT_EQ(make_faults(s)[0]->truth().onset_step, 8);
  for (const auto& r : recs) {
    if (r.step < 8 && r.step > 1) EXPECT_GT(*r.lr, 0.0) << r.step;
    if (r.step >= 8) EXPECT_EQ(*r.lr, 0.0) << r.step;  // min_lr 1e-4 would have been the healthy floor
  }
}

TEST(FaultEffect, FinishedScheduleOnResumeGivesLrZeroInTheResumedRun) {
  const std::string dir = temp_dir("fsor");
  const Scenario s = with_fault("schedule: {kind: cosine, warmup: 2, min_lr: 1.0e-4}\ncheckpoint: {every: 4}\n"
                                "restart: {at: 6}\n",
                                "{kind: lr_zero, at: 6, params: {mode: finished_schedule_on_resume}}");
  auto first = run_ranks(s, dir);
  EXPECT_TRUE(first[0].stopped_for_restart);
  run_ranks(s, dir, /*resume=*/true);
  const auto recs = steps_of(dir, 1);
  ASSERT_EQ(recs.size(), 6u + 8u);  // steps 1..6, then 5..12 resumed from the checkpoint at 4
  for (size_t i = 0; i < recs.size(); ++i) {
    if (i < 6 && i > 0) EXPECT_GT(*recs[i].lr, 0.0) << i;  // step 1 is warmup's lr(0) = 0
    else EXPECT_EQ(*recs[i].lr, 0.0) << i;
  }
  EXPECT_EQ(recs[6].step, 5);
}

TEST(FaultEffect, CycleWindowRepeatsTheBatchWithPeriodWindow) {
  const std::string dir = temp_dir("cw");
  run_ranks(with_fault("", "{kind: data_replay, at: 4, params: {mode: cycle_window, window: 3}}", 13), dir);
  for (int rank = 0; rank < 2; ++rank) {
    const auto recs = steps_of(dir, rank);
    ASSERT_EQ(recs.size(), 13u);
    auto h = [&](int64_t s) { return *recs[static_cast<size_t>(s - 1)].batch_hash; };
    for (int64_t s = 4; s + 3 <= 13; ++s) EXPECT_EQ(h(s), h(s + 3)) << s;
    EXPECT_NE(h(4), h(5));
    EXPECT_NE(h(5), h(6));
    EXPECT_NE(h(4), h(6));
    EXPECT_EQ(h(4), h(10));
    for (int64_t s = 1; s < 4; ++s) EXPECT_NE(h(s), h(4)) << s;  // the cycle starts at `at`
  }
}

TEST(FaultEffect, ResumeDropsSamplerStateReplaysTheEpochFromItsStart) {
  const std::string dir = temp_dir("rdss");
  const Scenario s = with_fault("checkpoint: {every: 4}\nrestart: {at: 7}\n",
                                "{kind: data_replay, at: 7, params: {mode: resume_drops_sampler_state}}");
  run_ranks(s, dir);
  run_ranks(s, dir, /*resume=*/true);
  for (int rank = 0; rank < 2; ++rank) {
    const auto recs = steps_of(dir, rank);
    ASSERT_EQ(recs.size(), 7u + 8u);  // 1..7, then 5..12 from the checkpoint at 4
    for (size_t k = 0; k < 7; ++k)  // resumed steps 5, 6, ... train the batches of steps 1, 2, ...
      EXPECT_EQ(*recs[7 + k].batch_hash, *recs[k].batch_hash) << k;
    EXPECT_EQ(recs[7].step, 5);
    EXPECT_NE(*recs[7].batch_hash, *recs[4].batch_hash);  // not what step 5 trained the first time
  }
}

TEST(FaultEffect, OverflowStreakHalvesTheScaleExactlyStepsTimesAndSkips) {
  const std::string dir = temp_dir("os");
  run_ranks(with_fault("precision: fp16\nloss_scaler: {init_scale: 1024}\n",
                       "{kind: loss_scale_collapse, at: 3, params: {mode: overflow_streak, steps: 4}}"),
            dir);
  const auto recs = steps_of(dir, 0);
  ASSERT_EQ(recs.size(), 12u);
  for (const auto& r : recs) {
    const bool streak = r.step >= 3 && r.step < 7;
    EXPECT_EQ(*r.overflow, streak) << r.step;
    EXPECT_EQ(*r.skipped, streak) << r.step;
    const int halvings = static_cast<int>(std::clamp<int64_t>(r.step - 3, 0, 4));
    EXPECT_EQ(*r.loss_scale, std::ldexp(1024.0, -halvings)) << r.step;  // the scale this step used
    EXPECT_EQ(*r.opt_step, r.step - std::clamp<int64_t>(r.step - 2, 0, 4)) << r.step;  // skipped: 3..6
  }
}

TEST(FaultEffect, ScaleClampedLowClampsFromTheNextStep) {
  const std::string dir = temp_dir("scl");
  run_ranks(with_fault("precision: fp16\nloss_scaler: {init_scale: 1024}\n",
                       "{kind: loss_scale_collapse, at: 5, params: {mode: scale_clamped_low, max_scale: 0.125}}"),
            dir);
  for (const auto& r : steps_of(dir, 1)) {
    if (r.step <= 5) EXPECT_EQ(*r.loss_scale, 1024.0) << r.step;
    else EXPECT_EQ(*r.loss_scale, 0.125) << r.step;
    EXPECT_FALSE(*r.overflow);
  }
}

TEST(FaultEffect, StaleLoggingFreezesTheLoggedStepAndLossWhileTrainingGoesOn) {
  const std::string dir = temp_dir("stale");
  run_ranks(with_fault("", "{kind: run_not_alive, at: 6, params: {mode: stale_logging}}"), dir);
  const auto recs = steps_of(dir, 0);
  ASSERT_EQ(recs.size(), 12u);
  for (size_t i = 5; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].step, 5);
    EXPECT_EQ(*recs[i].loss, *recs[4].loss);
    EXPECT_EQ(*recs[i].loss_avg, *recs[4].loss);
    EXPECT_EQ(*recs[i].opt_step, static_cast<int64_t>(i) + 1);  // training goes on underneath
  }
  EXPECT_NE(*recs[5].update_norm, 0.0);
}

TEST(FaultEffect, HangBlocksTheTargetAndThePeersFailWithinTheCollectiveTimeout) {
  const std::string dir = temp_dir("hang");
  const Scenario s = with_fault("collective_timeout_s: 1.5\n",
                                "{kind: run_not_alive, at: 5, target: {rank: 1}, params: {mode: hang, timeout_s: 3}}");
  std::vector<std::string> errors(2);
  std::vector<double> seconds(2);
  std::vector<std::thread> ts;
  const int port = test_port();
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      RankOptions o;
      o.scenario = s;
      o.run_dir = dir;
      o.rank = r;
      o.world_size = 2;
      o.master_port = port;
      o.threads = 1;
      o.run_t0 = 1.0;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        train_rank(o);
      } catch (const RankError& e) {
        errors[r] = e.kind() == RankError::Kind::comm ? e.what() : std::string("wrong kind: ") + e.what();
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  for (auto& t : ts) t.join();
  EXPECT_NE(errors[0].find("all-reduce failed"), std::string::npos) << errors[0];
  EXPECT_LT(seconds[0], 1.5 + 5.0);  // the collective timeout, plus start-up and a loaded machine's slack
  EXPECT_GE(seconds[1], 3.0);              // the hung rank blocked for its timeout_s
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(steps_of(dir, rank).size(), 4u);  // steps 1..4 on disk
}

// Timing on a shared machine is noisy, so the slowdown is large (20x the rank's compute) and the test
// compares medians: rank 0's wait inside the all-reduce must grow by a good part of rank 1's extra time.
TEST(FaultEffect, SlowRankMakesEveryStepWaitForIt) {
  const std::string dir = temp_dir("slow");
  run_ranks(with_fault("", "{kind: straggler, at: 9, target: {rank: 1}, params: {mode: slow_rank, slowdown: 20}}", 18),
            dir);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto r0 = steps_of(dir, 0), r1 = steps_of(dir, 1);
  ASSERT_EQ(r0.size(), 18u);
  // rank 1's own time outside the all-reduce grows by its sleep; rank 0 waits that long for it
  std::vector<double> wait_before, wait_after, own1_before, own1_after;
  for (size_t i = 1; i < r0.size(); ++i) {  // step 1 warms up
    (r0[i].step < 9 ? wait_before : wait_after).push_back(*r0[i].comm_ms);
    (r1[i].step < 9 ? own1_before : own1_after).push_back(*r1[i].step_ms - *r1[i].comm_ms);
  }
  const double extra = median(own1_after) - median(own1_before);
  EXPECT_GT(extra, 0.0);
  EXPECT_GT(median(wait_after) - median(wait_before), 0.5 * extra);
}

}  // namespace
}  // namespace flatline::test
