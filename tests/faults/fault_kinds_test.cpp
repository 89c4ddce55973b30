// The four other fault kinds: what each asks of the trainer at its hook point, its ground truth, and
// the scenarios it refuses (with file:line).
#include <gtest/gtest.h>

#include <cmath>

#include "faults/fault.h"
#include "faults/scenario_file.h"

namespace flatline {
namespace {

Scenario scenario(const std::string& extra, const std::string& fault) {
  return load_scenario_text("name: t\nseed: 1\nworld_size: 2\nsteps: 300\n" + extra + "faults:\n  - " + fault +
                                "\nexpect: {cause: healthy}\n",
                            "k.yaml");
}

StepActions at(const Fault& f, Hook h, int64_t step, int rank) {
  StepActions a;
  a.step = step;
  a.rank = rank;
  a.world_size = 2;
  if (f.active(step, rank)) f.apply(h, a);
  return a;
}

std::string error_of(const std::string& extra, const std::string& fault) {
  try {
    make_faults(scenario(extra, fault));
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(RunNotAliveFault, HangBlocksOnlyTheTargetRankOnceAtTheAllReduce) {
  Scenario s = scenario("collective_timeout_s: 8\n", "{kind: run_not_alive, at: 50, target: {rank: 1}, params: {mode: hang}}");
  auto fs = make_faults(s);
  EXPECT_EQ(at(*fs[0], Hook::at_allreduce, 50, 1).block_s, 18.0);  // collective timeout + 10 s
  EXPECT_EQ(at(*fs[0], Hook::at_allreduce, 50, 0).block_s, 0.0);
  EXPECT_EQ(at(*fs[0], Hook::at_allreduce, 51, 1).block_s, 0.0);
  EXPECT_EQ(at(*fs[0], Hook::before_forward, 50, 1).block_s, 0.0);
  EXPECT_EQ(fs[0]->truth().onset_step, 50);
  EXPECT_TRUE(fs[0]->truth().ends_run);  // the run's failure is the fault's effect, not the harness's
  EXPECT_EQ(error_of("", "{kind: run_not_alive, at: 50, params: {mode: hang}}"),
            "k.yaml:6: run_not_alive/hang needs a target rank");
}

TEST(RunNotAliveFault, StaleLoggingFreezesTheLogFromTheOnset) {
  auto fs = make_faults(scenario("", "{kind: run_not_alive, at: 150, params: {mode: stale_logging}}"));
  EXPECT_FALSE(at(*fs[0], Hook::at_logging, 149, 0).freeze_logging);
  EXPECT_TRUE(at(*fs[0], Hook::at_logging, 150, 0).freeze_logging);
  EXPECT_TRUE(at(*fs[0], Hook::at_logging, 299, 1).freeze_logging);
  EXPECT_FALSE(fs[0]->truth().ends_run);
}

TEST(DataReplayFault, CycleWindowRepeatsTheSameBatchIndicesAndIsTrueFromTheFirstRepeat) {
  auto fs = make_faults(scenario("", "{kind: data_replay, at: 100, params: {mode: cycle_window, window: 4}}"));
  std::vector<int64_t> idx;
  for (int64_t s = 100; s < 110; ++s) idx.push_back(at(*fs[0], Hook::before_forward, s, 0).batch_index);
  EXPECT_EQ(idx, (std::vector<int64_t>{99, 100, 101, 102, 99, 100, 101, 102, 99, 100}));
  EXPECT_EQ(at(*fs[0], Hook::before_forward, 99, 0).batch_index, -1);
  EXPECT_EQ(fs[0]->truth().active_from, 104);  // steps 100..103 train the healthy batches
  EXPECT_EQ(fs[0]->truth().onset_step, 104);
}

TEST(DataReplayFault, ResumeDropsSamplerOnlyAtTheRestartAndNeedsOne) {
  auto fs = make_faults(scenario("checkpoint: {every: 50}\nrestart: {at: 180}\n",
                                 "{kind: data_replay, at: 180, params: {mode: resume_drops_sampler_state}}"));
  ResumeActions r;
  fs[0]->resume(r, 150);
  EXPECT_FALSE(r.restore_sampler);
  EXPECT_EQ(fs[0]->truth().active_from, 151);  // the resumed run restarts after the checkpoint at 150
  EXPECT_EQ(error_of("", "{kind: data_replay, at: 180, params: {mode: resume_drops_sampler_state}}"),
            "k.yaml:6: data_replay/resume_drops_sampler_state: needs a 'restart: {at: N}' at or after the first "
            "checkpoint (nothing is replayed before it)");
  EXPECT_EQ(error_of("", "{kind: data_replay, at: 10, params: {mode: cycle_window}}"),
            "k.yaml:6: data_replay/cycle_window: needs params.window >= 1 (batches in the cycle)");
}

TEST(LossScaleCollapseFault, OverflowStreakInjectsInfForItsStepsOnly) {
  auto fs = make_faults(scenario("precision: fp16\n",
                                 "{kind: loss_scale_collapse, at: 120, params: {mode: overflow_streak, steps: 3}}"));
  EXPECT_FALSE(at(*fs[0], Hook::before_forward, 119, 0).inject_inf);
  EXPECT_TRUE(at(*fs[0], Hook::before_forward, 120, 0).inject_inf);
  EXPECT_TRUE(at(*fs[0], Hook::before_forward, 122, 1).inject_inf);
  EXPECT_FALSE(at(*fs[0], Hook::before_forward, 123, 0).inject_inf);
  EXPECT_EQ(fs[0]->truth().onset_step, 120);
  EXPECT_EQ(error_of("", "{kind: loss_scale_collapse, at: 120, params: {mode: overflow_streak}}"),
            "k.yaml:6: loss_scale_collapse/overflow_streak: needs 'precision: fp16' (no loss scaler otherwise)");
}

TEST(LossScaleCollapseFault, ClampSetsTheMaximumScaleAndActsFromTheNextStep) {
  auto fs = make_faults(scenario("precision: fp16\n",
                                 "{kind: loss_scale_collapse, at: 100, params: {mode: scale_clamped_low, max_scale: 0.25}}"));
  EXPECT_EQ(at(*fs[0], Hook::before_optimizer, 100, 0).max_loss_scale, 0.25);
  EXPECT_TRUE(std::isinf(at(*fs[0], Hook::before_optimizer, 99, 0).max_loss_scale));
  EXPECT_EQ(fs[0]->truth().onset_step, 101);
}

TEST(ZeroGradRankFault, ActsOnTheTargetRankAtTheRightHook) {
  auto zb = make_faults(scenario("", "{kind: zero_grad_rank, at: 90, target: {rank: 1}, params: {mode: zeroed_buffer}}"));
  EXPECT_TRUE(at(*zb[0], Hook::after_backward, 90, 1).zero_grads);
  EXPECT_FALSE(at(*zb[0], Hook::after_backward, 90, 0).zero_grads);
  EXPECT_FALSE(at(*zb[0], Hook::after_backward, 89, 1).zero_grads);
  auto sb = make_faults(scenario("", "{kind: zero_grad_rank, at: 90, target: {rank: 0}, params: {mode: skipped_backward}}"));
  EXPECT_TRUE(at(*sb[0], Hook::before_forward, 95, 0).skip_backward);
  EXPECT_EQ(sb[0]->truth().rank, 0);
  EXPECT_EQ(error_of("", "{kind: zero_grad_rank, at: 90, params: {mode: zeroed_buffer}}"),
            "k.yaml:6: zero_grad_rank/zeroed_buffer: needs world_size >= 2 and one target rank");
}

}  // namespace
}  // namespace flatline
