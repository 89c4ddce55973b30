// RunPlan and OnsetClock (faults/effects.h): the decisions the trainer and the simulator share, on
// exact values.
#include <gtest/gtest.h>

#include <cmath>

#include "faults/effects.h"
#include "faults/scenario_file.h"

namespace flatline {
namespace {

Scenario scenario(const std::string& extra, const std::string& fault = "") {
  return load_scenario_text("name: t\nseed: 1\nworld_size: 2\nsteps: 300\n" + extra +
                                (fault.empty() ? "" : "faults:\n  - " + fault + "\n") + "expect: {cause: healthy}\n",
                            "e.yaml");
}

TEST(RunPlan, StartsWithTheConfiguredScaler) {
  const RunPlan fp32(scenario(""));
  EXPECT_FALSE(fp32.start().scaler.enabled);
  EXPECT_EQ(fp32.start().scaler.scale, 1.0);
  const RunPlan fp16(scenario("precision: fp16\nloss_scaler: {init_scale: 1024, growth_interval: 7}\n"));
  const TrainCounters c = fp16.start();
  EXPECT_TRUE(c.scaler.enabled);
  EXPECT_EQ(c.scaler.scale, 1024.0);
  EXPECT_EQ(c.scaler.growth_interval, 7);
  EXPECT_EQ(c.opt_step, 0);
  EXPECT_EQ(c.sched_step, 0);
}

TEST(RunPlan, UpdateSkipsOnOverflowButTheSchedulerStillSteps) {
  const RunPlan p(scenario("precision: fp16\nschedule: {kind: constant, warmup: 4}\noptimizer: {lr: 0.5}\n"));
  TrainCounters c = p.start();
  StepActions a;
  UpdateDecision d = p.update(c, a, /*found_inf=*/true);
  EXPECT_TRUE(d.skip);
  EXPECT_EQ(d.lr, 0.0);  // lr(0) of a warmup
  EXPECT_EQ(c.opt_step, 0);
  EXPECT_EQ(c.sched_step, 1);
  EXPECT_EQ(c.scaler.scale, 32768.0);
  d = p.update(c, a, false);
  EXPECT_FALSE(d.skip);
  EXPECT_EQ(d.lr, 0.125);  // lr(1) = 0.5 * 1 / 4
  EXPECT_EQ(c.opt_step, 1);
  a.scheduler_frozen = true;
  a.max_loss_scale = 4.0;  // a clamp applies after the scaler's own update
  d = p.update(c, a, false);
  EXPECT_EQ(d.lr, 0.25);
  EXPECT_EQ(c.sched_step, 2);  // frozen: did not step
  EXPECT_EQ(c.scaler.scale, 4.0);
}

TEST(RunPlan, FrozenLoggerKeepsItsLastStepAndLoss) {
  LoggedStep l;
  StepActions a;
  RunPlan::log(l, a, 9, 2.5);
  EXPECT_EQ(l.step, 9);
  a.freeze_logging = true;
  RunPlan::log(l, a, 10, 2.4);
  EXPECT_EQ(l.step, 9);
  EXPECT_EQ(l.loss, 2.5);
  EXPECT_EQ(RunPlan::logged_loss_avg(l, a, 2.3), 2.5);
  a.freeze_logging = false;
  EXPECT_EQ(RunPlan::logged_loss_avg(l, a, 2.3), 2.3);
}

TEST(RunPlan, ActionsOfEveryHookAndWhatTheyMean) {
  const RunPlan p(scenario("", "{kind: data_replay, at: 10, params: {mode: cycle_window, window: 3}}"));
  EXPECT_FALSE(RunPlan::replaced_batch(p.actions(9, 0, 2)));
  EXPECT_EQ(*RunPlan::replaced_batch(p.actions(13, 1, 2)), 9);  // 9, 10, 11, 9, ...
  const RunPlan z(scenario("", "{kind: zero_grad_rank, at: 5, target: {rank: 1}, params: {mode: skipped_backward}}"));
  EXPECT_TRUE(RunPlan::contributes_zeros(z.actions(5, 1, 2)));
  EXPECT_FALSE(RunPlan::contributes_zeros(z.actions(5, 0, 2)));
  EXPECT_FALSE(RunPlan::contributes_zeros(z.actions(4, 1, 2)));
}

TEST(RunPlan, ResumeKeepsTheScenariosScalerSettingsAndFinishesASchedule) {
  RunPlan p(scenario("checkpoint: {every: 50}\nrestart: {at: 120}\nprecision: fp16\n"
                     "loss_scaler: {growth_interval: 9}\nschedule: {kind: cosine, warmup: 10, min_lr: 0.001}\n",
                     "{kind: lr_zero, at: 120, params: {mode: finished_schedule_on_resume}}"));
  EXPECT_TRUE(p.stops_for_restart(120, false));
  EXPECT_FALSE(p.stops_for_restart(120, true));
  TrainCounters restored;  // as a checkpoint gives it: its own scaler state
  restored.step = 100;
  restored.sched_step = 100;
  restored.scaler.scale = 512;
  restored.scaler.enabled = false;
  restored.scaler.growth_interval = 2000;
  const ResumeActions ra = p.resume(restored);
  EXPECT_TRUE(ra.restore_sampler);
  EXPECT_TRUE(restored.scaler.enabled);
  EXPECT_EQ(restored.scaler.growth_interval, 9);
  EXPECT_EQ(restored.scaler.scale, 512.0);
  EXPECT_EQ(restored.sched_step, 300);  // the end of the schedule
  EXPECT_EQ(p.schedule().lr(restored.sched_step), 0.0);
  EXPECT_EQ(p.update(restored, StepActions{}, false).lr, 0.0);
}

Record step(int rank, int64_t s, double t) {
  Record r;
  r.rank = rank;
  r.step = s;
  r.t = t;
  return r;
}

TEST(OnsetClock, OnsetStepOfTheTargetRankOrTheStepBefore) {
  FaultTruth on_rank1, on_all, frozen, hang;
  on_rank1.rank = 1;
  on_rank1.onset_step = 5;
  on_all.onset_step = 5;     // all ranks: timed on rank 0
  frozen.onset_step = 7;     // never logged as itself (a frozen logger)
  hang.rank = 1;
  hang.onset_step = 5;
  hang.onset_at_start = true;  // the moment step 5 began: rank 1's record of step 4
  OnsetClock c({on_rank1, on_all, frozen, hang});
  for (int64_t s = 1; s <= 6; ++s)
    for (int r = 0; r < 2; ++r) c.observe(step(r, s, s + 0.1 * r));
  c.observe(step(0, 6, 7.0));  // frozen: step 6 logged again
  EXPECT_EQ(c.onset_t(0), 5.1);
  EXPECT_EQ(c.onset_t(1), 5.0);
  EXPECT_EQ(c.onset_t(2), 6.0);
  EXPECT_EQ(c.onset_t(3), 4.1);
  OnsetClock none({on_rank1});
  EXPECT_TRUE(std::isnan(none.onset_t(0)));
}

TEST(OnsetClock, AFaultAtTheResumeCountsFromTheResumedRun) {
  FaultTruth f;
  f.onset_step = 51;
  f.at_resume = true;
  OnsetClock c({f});
  for (int64_t s = 1; s <= 60; ++s) c.observe(step(0, s, s));  // the first run passes step 51 at t = 51
  Record resume;
  resume.kind = RecordKind::event;
  resume.name = "resume";
  resume.t = 80;
  c.observe(resume);
  EXPECT_EQ(c.onset_t(0), 80.0);  // resumed, step 51 not yet logged: the resume began it
  c.observe(step(0, 51, 81.5));
  EXPECT_EQ(c.onset_t(0), 81.5);
}

}  // namespace
}  // namespace flatline
