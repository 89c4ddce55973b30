// The repairs of a confirmation (confirm/*.cpp) through RunPlan (faults/effects.h), the rules both step
// paths of the trainer follow: each acts after the faults, from its step on, on exact values; the
// registry covers the checklist and nothing else; a repair's JSON is read strictly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "faults/intervention.h"
#include "core/check.h"
#include "faults/scenario_file.h"
#include "run/causes.h"
#include "faults/effects.h"

namespace flatline {
namespace {

Scenario scenario(const std::string& extra, const std::string& fault = "") {
  return load_scenario_text("name: t\nseed: 1\nworld_size: 2\nsteps: 300\n" + extra +
                                (fault.empty() ? "" : "faults:\n  - " + fault + "\n") + "expect: {cause: healthy}\n",
                            "r.yaml");
}

std::shared_ptr<const Intervention> repair(const Scenario& s, const std::string& cause, int64_t from, int rank = -1,
                                           double lr_before = 0) {
  return make_intervention({cause, rank, from, lr_before}, s);
}

StepActions all_hooks(const RunPlan& p, int64_t step, int rank) { return p.actions(step, rank, 2); }

TEST(Repairs, EveryChecklistCauseHasOneAndNothingElseDoes) {
  std::vector<std::string> expected = checklist_causes();
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(intervention_causes(), expected);
  const Scenario s = scenario("");
  std::vector<std::string> none = {"no_such_cause"};  // every row that is no checklist cause, and no row
  for (const Cause& c : cause_table())
    if (c.kind != CauseKind::checklist) none.push_back(c.id);
  for (const std::string& c : none) {
    RepairSpec r;
    r.cause = c;
    EXPECT_FALSE(has_intervention(c));
    EXPECT_THROW(make_intervention(r, s), std::invalid_argument) << c;
  }
  // registering one for a row that is not a checklist cause is a bug
  EXPECT_THROW(register_intervention("straggler", nullptr), InvariantError);
  EXPECT_THROW(register_intervention("lr_zero", nullptr), InvariantError);  // twice
}

TEST(Repairs, LrZeroHoldsTheLastLrBeforeTheCollapseOrTheConfiguredFloor) {
  // the schedule sized for 160 steps: lr reaches 0 at step 160 (lr_zero/schedule_total_too_short)
  const Scenario s = scenario("schedule: {kind: cosine, warmup: 10, min_lr: 3.0e-4}\n",
                              "{kind: lr_zero, at: 160, params: {mode: schedule_total_too_short}}");
  const double collapsed = 1e-3 * s.optimizer.lr;  // 0.1% of the peak
  const RunPlan broken(s);
  const RunPlan floor(s, repair(s, "lr_zero", 150, -1, 4e-6));  // the floor is larger: held there
  const RunPlan last(s, repair(s, "lr_zero", 150, -1, 1e-3));   // the last lr is larger: held at it
  TrainCounters a = broken.start(), b = floor.start(), c = last.start();
  int held = 0;
  for (int64_t step = 1; step <= 200; ++step) {
    const double lb = broken.update(a, broken.actions(step, 0, 2), false).lr;
    const double lf = floor.update(b, floor.actions(step, 0, 2), false).lr;
    const double ll = last.update(c, last.actions(step, 0, 2), false).lr;
    const bool repaired = step >= 150 && lb < collapsed;  // collapsed, from its step on: else as scheduled, bit for bit
    held += repaired;
    EXPECT_EQ(lf, repaired ? 3e-4 : lb) << step;
    EXPECT_EQ(ll, repaired ? 1e-3 : lb) << step;
  }
  EXPECT_EQ(held, 44);  // steps 157..200: lr(155), used by step 156, is the last above 0.1% of the peak
  EXPECT_EQ(floor.actions(149, 0, 2).lr_hold_below, 0.0);  // not active before from_step
}

TEST(Repairs, LrZeroChangesNothingWhereTheLrNeverCollapsed) {
  const Scenario s = scenario("schedule: {kind: cosine, warmup: 10, min_lr: 3.0e-4}\n");
  const RunPlan healthy(s), wrong(s, repair(s, "lr_zero", 120, -1, 1.7e-3));  // a wrong diagnosis at step 120
  TrainCounters a = healthy.start(), b = wrong.start();
  for (int64_t step = 1; step <= 300; ++step)
    EXPECT_EQ(wrong.update(b, wrong.actions(step, 0, 2), false).lr, healthy.update(a, healthy.actions(step, 0, 2), false).lr);
}

TEST(Repairs, LrZeroWithNothingToHoldFollowsTheConfiguredSchedule) {
  // a warmup that never advances: lr 0 from step 1, no floor
  const Scenario s = scenario("schedule: {kind: cosine, warmup: 20}\n",
                              "{kind: lr_zero, at: 1, params: {mode: scheduler_not_stepped}}");
  const RunPlan broken(s), fixed(s, repair(s, "lr_zero", 2, -1, 0.0));
  const LrSchedule configured(s.schedule, s.optimizer.lr);
  TrainCounters a = broken.start(), b = fixed.start();
  for (int64_t step = 1; step <= 40; ++step) {
    EXPECT_EQ(broken.update(a, broken.actions(step, 0, 2), false).lr, 0.0) << step;
    const double lr = fixed.update(b, fixed.actions(step, 0, 2), false).lr;
    EXPECT_EQ(lr, step >= 2 ? configured.lr(step - 1) : 0.0) << step;
  }
}

TEST(Repairs, DataReplayTrainsTheBatchTheStepCountImplies) {
  const Scenario s = scenario("", "{kind: data_replay, at: 100, params: {mode: cycle_window, window: 8}}");
  const RunPlan broken(s), fixed(s, repair(s, "data_replay", 108));
  for (int64_t step = 100; step < 140; ++step) {
    const auto b = RunPlan::replaced_batch(all_hooks(broken, step, 1));
    ASSERT_TRUE(b);
    EXPECT_EQ(*b, 99 + (step - 100) % 8);
    const auto f = RunPlan::replaced_batch(all_hooks(fixed, step, 1));
    ASSERT_TRUE(f);
    EXPECT_EQ(*f, step < 108 ? *b : step - 1) << step;
  }
  // on a run whose loader is healthy it names the batch the sampler would have given anyway
  const Scenario h = scenario("");
  EXPECT_EQ(*RunPlan::replaced_batch(RunPlan(h, repair(h, "data_replay", 5)).actions(50, 0, 2)), 49);
}

TEST(Repairs, LossScaleCollapseResetsTheScaleLiftsTheCapAndKeepsAFloor) {
  const Scenario s = scenario("precision: fp16\n",
                              "{kind: loss_scale_collapse, at: 50, params: {mode: scale_clamped_low, max_scale: 0.25}}");
  RunPlan broken(s), fixed(s, repair(s, "loss_scale_collapse", 50));
  TrainCounters a = broken.start(), b = fixed.start();
  for (int64_t step = 1; step < 50; ++step) {
    broken.update(a, broken.actions(step, 0, 2), false);
    fixed.update(b, fixed.actions(step, 0, 2), false);
  }
  a.scaler.scale = b.scaler.scale = 0.25;  // collapsed by the time of the restart
  b.scaler.growth_tracker = 17;
  fixed.carry_on(b, false);
  EXPECT_EQ(b.scaler.scale, 65536.0);  // reset to its initial scale
  EXPECT_EQ(b.scaler.growth_tracker, 0);
  for (int64_t step = 50; step < 80; ++step) {
    const bool inf = step < 60;  // ten overflows in a row: the scale would halve ten times
    const UpdateDecision da = broken.update(a, broken.actions(step, 0, 2), inf);
    const UpdateDecision db = fixed.update(b, fixed.actions(step, 0, 2), inf);
    EXPECT_EQ(da.skip, inf);
    EXPECT_EQ(db.skip, inf);  // an overflow still skips its step
    EXPECT_LE(a.scaler.scale, 0.25) << step;  // the fault's cap, halved by each overflow
    EXPECT_EQ(b.scaler.scale, 65536.0) << step;  // the floor, and no cap
  }
  // and at a resume, after the faults' own resume actions
  TrainCounters r = b;
  r.scaler.scale = 1.0;
  fixed.resume(r);
  EXPECT_EQ(r.scaler.scale, 65536.0);
  // without fp16 there is no scaler: nothing changes
  const Scenario f32 = scenario("");
  RunPlan p(f32, repair(f32, "loss_scale_collapse", 1));
  TrainCounters c = p.start();
  p.carry_on(c, false);
  EXPECT_FALSE(c.scaler.enabled);
  EXPECT_EQ(c.scaler.scale, 1.0);
  EXPECT_FALSE(p.update(c, p.actions(5, 0, 2), false).skip);
  EXPECT_EQ(c.scaler.scale, 1.0);
}

TEST(Repairs, ZeroGradRankRestoresTheNamedRanksGradientOnly) {
  for (const char* mode : {"zeroed_buffer", "skipped_backward"}) {
    const Scenario s = scenario("", std::string("{kind: zero_grad_rank, at: 100, target: {rank: 1}, params: {mode: ") +
                                        mode + "}}");
    const RunPlan broken(s), right(s, repair(s, "zero_grad_rank", 100, 1)), wrong(s, repair(s, "zero_grad_rank", 100, 0));
    EXPECT_TRUE(RunPlan::contributes_zeros(all_hooks(broken, 120, 1))) << mode;
    EXPECT_FALSE(RunPlan::contributes_zeros(all_hooks(right, 120, 1))) << mode;
    EXPECT_TRUE(RunPlan::contributes_zeros(all_hooks(wrong, 120, 1))) << mode;  // the wrong rank repaired
    EXPECT_FALSE(RunPlan::contributes_zeros(all_hooks(right, 120, 0))) << mode;
  }
}

TEST(Repairs, RunNotAliveRestartsWithoutTheHangOrTheFrozenLogger) {
  const Scenario hang = scenario("", "{kind: run_not_alive, at: 120, target: {rank: 1}, params: {mode: hang, timeout_s: 40}}");
  EXPECT_EQ(RunPlan(hang).actions(120, 1, 2).block_s, 40.0);
  EXPECT_EQ(RunPlan(hang, repair(hang, "run_not_alive", 120)).actions(120, 1, 2).block_s, 0.0);
  const Scenario stale = scenario("", "{kind: run_not_alive, at: 50, params: {mode: stale_logging}}");
  EXPECT_TRUE(RunPlan(stale).actions(60, 0, 2).freeze_logging);
  EXPECT_FALSE(RunPlan(stale, repair(stale, "run_not_alive", 50)).actions(60, 0, 2).freeze_logging);
}

TEST(Repairs, NoneLeavesEveryDecisionAsTheFaultsMadeIt) {
  const Scenario s = scenario("precision: fp16\n", "{kind: lr_zero, at: 160, params: {mode: schedule_total_too_short}}");
  const StepActions a = RunPlan(s).actions(170, 0, 2);
  EXPECT_EQ(a.lr_hold_below, 0.0);
  EXPECT_EQ(a.min_loss_scale, 0.0);
  EXPECT_EQ(a.batch_index, -1);
}

TEST(Repairs, DescribeTheirValues) {
  const Scenario s = scenario("precision: fp16\nschedule: {kind: cosine, min_lr: 3.0e-4}\n");
  EXPECT_NE(repair(s, "lr_zero", 158, -1, 4e-6)->describe().find("held at 0.0003 (the configured floor"),
            std::string::npos);
  EXPECT_NE(repair(s, "zero_grad_rank", 120, 1)->describe().find("rank 1"), std::string::npos);
  EXPECT_NE(repair(s, "loss_scale_collapse", 120)->describe().find("65536"), std::string::npos);
}

TEST(RepairSpecJson, RoundTripsAndRefusesBadInput) {
  RepairSpec r;
  r.cause = "zero_grad_rank";
  r.rank = 3;
  r.from_step = 121;
  r.lr_before = 2.5e-4;
  const RepairSpec b = repair_from_json(to_json(r), "x.json");
  EXPECT_EQ(b.cause, r.cause);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.from_step, 121);
  EXPECT_EQ(b.lr_before, 2.5e-4);
  auto err = [](const std::string& text) {
    try {
      repair_from_json(text, "x.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("{\"cause\": \"lr_zero\"}"), "x.json: missing \"from_step\"");
  EXPECT_EQ(err("{\"cause\": 1, \"from_step\": 2}"), "x.json: \"cause\" has the wrong type (number)");
  EXPECT_EQ(err("{\"cause\": \"lr_zero\", \"from_step\": 2, \"lr\": 1}"),
            "x.json: unknown field \"lr\" (expected cause, rank, from_step, lr_before)");
  EXPECT_NE(err("{\"cause\""), "no error");
  EXPECT_EQ(err("[1]"), "x.json: expected a JSON object {\"cause\": ..., ...}");
}

}  // namespace
}  // namespace flatline
