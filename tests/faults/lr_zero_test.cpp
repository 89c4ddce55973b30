// lr_zero fault (faults/lr_zero.cpp) and the Fault base: plan, ground truth, validation with file:line,
// and when a fault is active (onset, lifetime, target rank, seeded ranges).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "faults/fault.h"
#include "faults/scenario_file.h"

namespace flatline {
namespace {

std::string test_data(const std::string& rel) {
  const char* env = std::getenv("FLATLINE_TEST_DATA");
  return (env && *env ? std::string(env) : std::string(FLATLINE_SOURCE_DIR) + "/tests/data") + "/" + rel;
}

// The DESIGN.md example: cosine, warmup 50, 1000 steps, peak 3e-3, min_lr 3e-4, lr_zero at 400.
Scenario design_example() { return load_scenario_file(test_data("scenarios/lr_cosine_400_of_1000.yaml")); }

// A scenario with one lr_zero fault; `fault` is the body of the fault's flow mapping.
Scenario with_fault(const std::string& fault, const std::string& extra = "",
                    const std::string& schedule = "{kind: cosine, warmup: 50, min_lr: 3.0e-4}") {
  return load_scenario_text("name: t\nworld_size: 2\nsteps: 1000\nschedule: " + schedule + "\n" + extra +
                                "faults:\n  - {kind: lr_zero, " + fault + "}\nexpect: {cause: lr_zero}\n",
                            "t.yaml");
}

std::string make_error(const Scenario& s) {
  try {
    make_faults(s);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(LrZeroFault, ScheduleTotalTooShortPlansLrZeroAtOnset) {
  Scenario s = design_example();
  auto faults = make_faults(s);
  ASSERT_EQ(faults.size(), 1u);
  const LrSchedule healthy(s.schedule, s.optimizer.lr);
  TrainPlan p{healthy};
  faults[0]->plan(p);
  EXPECT_EQ(p.schedule.spec.total, 399);
  EXPECT_EQ(p.schedule.spec.min_lr, 0.0);
  EXPECT_EQ(p.schedule.lr(399), 0.0);  // used by logged step 400
  EXPECT_GT(p.schedule.lr(398), 0.0);
  EXPECT_EQ(p.schedule.lr(999), 0.0);  // and stays there
  // Warmup is untouched, the decay is faster than the healthy one.
  for (int64_t k = 0; k <= 50; ++k) EXPECT_EQ(p.schedule.lr(k), healthy.lr(k)) << k;
  EXPECT_LT(p.schedule.lr(51), healthy.lr(51));
}

// First logged step s (1-based, trains with lr(s - 1)) where the planned lr differs from the healthy one.
int64_t first_difference(const Scenario& s, const Fault& f) {
  const LrSchedule healthy(s.schedule, s.optimizer.lr);
  TrainPlan p{healthy};
  f.plan(p);
  for (int64_t step = 1; step <= s.steps; ++step)
    if (p.schedule.lr(step - 1) != healthy.lr(step - 1)) return step;
  return -1;
}

TEST(LrZeroFault, ScheduleTotalTooShortTruth) {
  Scenario s = design_example();
  auto faults = make_faults(s);
  FaultTruth t = faults[0]->truth();
  EXPECT_EQ(t.kind, "lr_zero");
  EXPECT_EQ(t.mode, "schedule_total_too_short");
  EXPECT_EQ(t.rank, -1);
  EXPECT_EQ(t.onset_step, 400);
  // lr(50) is peak in both schedules (end of warmup); lr(51), used by step 52, is the first to differ.
  EXPECT_EQ(first_difference(s, *faults[0]), 52);
  EXPECT_EQ(t.active_from, 52);
}

TEST(LrZeroFault, ActiveFromIsTheEndOfWarmupEvenWhenPeakMinusFloorRounds) {
  // peak 1e-2, min_lr 1e-3: min_lr + (peak - min_lr) != peak in doubles; active_from must still be
  // warmup + 2, not an artefact one step earlier.
  Scenario s = load_scenario_text(
      "name: t\nsteps: 1000\noptimizer: {lr: 1.0e-2}\nschedule: {kind: cosine, warmup: 50, min_lr: 1.0e-3}\n"
      "faults:\n  - {kind: lr_zero, at: 400, params: {mode: schedule_total_too_short}}\nexpect: {cause: lr_zero}\n",
      "t.yaml");
  auto faults = make_faults(s);
  EXPECT_EQ(first_difference(s, *faults[0]), 52);
  EXPECT_EQ(faults[0]->truth().active_from, 52);
  EXPECT_EQ(faults[0]->truth().onset_step, 400);
}

TEST(LrZeroFault, LinearScheduleTooShort) {
  Scenario s = with_fault("at: 200, params: {mode: schedule_total_too_short}", "",
                          "{kind: linear, warmup: 10, min_lr: 1.0e-4}");
  auto faults = make_faults(s);
  TrainPlan p{LrSchedule(s.schedule, s.optimizer.lr)};
  faults[0]->plan(p);
  EXPECT_EQ(p.schedule.lr(199), 0.0);
  EXPECT_GT(p.schedule.lr(198), 0.0);
  EXPECT_EQ(faults[0]->truth().onset_step, 200);
  EXPECT_EQ(faults[0]->truth().active_from, 12);
}

TEST(LrZeroFault, InvalidConfigurationsNameFileAndLine) {
  // The fault is declared on line 6 of with_fault's text.
  EXPECT_EQ(make_error(with_fault("at: 30, params: {mode: schedule_total_too_short}")),
            "t.yaml:6: lr_zero/schedule_total_too_short: 'at' (30) must come after warmup (50 steps)");
  EXPECT_EQ(make_error(with_fault("at: 51, params: {mode: schedule_total_too_short}")),
            "t.yaml:6: lr_zero/schedule_total_too_short: 'at' (51) must come after warmup (50 steps)");
  EXPECT_EQ(make_error(with_fault("at: 52, params: {mode: schedule_total_too_short}")), "");
  EXPECT_EQ(make_error(with_fault("at: 400, params: {mode: schedule_total_too_short}", "",
                                  "{kind: constant, warmup: 50}")),
            "t.yaml:6: lr_zero/schedule_total_too_short: a constant schedule has no total to size wrong; use cosine "
            "or linear");
  EXPECT_EQ(make_error(with_fault("range: {start: 100, end: 200}, params: {mode: schedule_total_too_short}")),
            "t.yaml:6: lr_zero/schedule_total_too_short: needs 'at' (a single onset step), not a range");
  EXPECT_EQ(make_error(with_fault("at: 400, target: {rank: 1}, params: {mode: schedule_total_too_short}")),
            "t.yaml:6: lr_zero/schedule_total_too_short: the schedule is shared by every rank: target must be 'all'");
  EXPECT_EQ(make_error(with_fault("at: 400, params: {mode: finished_schedule_on_resume}")),
            "t.yaml:6: lr_zero/finished_schedule_on_resume: needs a 'restart: {at: N}' at or after the first "
            "checkpoint");
  EXPECT_EQ(make_error(with_fault("at: 1, params: {mode: scheduler_not_stepped}", "",
                                  "{kind: cosine, warmup: 0}")),
            "t.yaml:6: lr_zero/scheduler_not_stepped: needs a warmup and 'at: 1': the scheduler never steps, so lr "
            "stays at lr(0) = 0");
  EXPECT_EQ(make_error(with_fault("at: 5, params: {mode: scheduler_not_stepped}", "", "{kind: cosine, warmup: 10}")),
            "t.yaml:6: lr_zero/scheduler_not_stepped: needs a warmup and 'at: 1': the scheduler never steps, so lr "
            "stays at lr(0) = 0");
}

TEST(LrZeroFault, FinishedScheduleOnResume) {
  Scenario s = with_fault("at: 351, params: {mode: finished_schedule_on_resume}",
                          "checkpoint: {every: 100}\nrestart: {at: 350}\n");
  auto faults = make_faults(s);
  ResumeActions r;
  faults[0]->resume(r, 300);
  EXPECT_TRUE(r.finish_scheduler);
  EXPECT_TRUE(r.restore_sampler);
  FaultTruth t = faults[0]->truth();
  EXPECT_EQ(t.active_from, 301);  // the resumed ranks re-train from the checkpoint at 300
  EXPECT_EQ(t.onset_step, 301);
  // The plan is the healthy one.
  TrainPlan p{LrSchedule(s.schedule, s.optimizer.lr)};
  faults[0]->plan(p);
  EXPECT_EQ(p.schedule.spec.total, 1000);
}

TEST(LrZeroFault, SchedulerNotSteppedFreezesTheSchedulerFromAt) {
  Scenario s = with_fault("at: 1, params: {mode: scheduler_not_stepped}");
  auto faults = make_faults(s);
  FaultTruth t = faults[0]->truth();
  EXPECT_EQ(t.active_from, 2);  // step 1 trains with lr(0) = 0 in both; step 2 repeats it
  EXPECT_EQ(t.onset_step, 2);
  for (int64_t step : {1, 2, 500}) {
    for (int rank : {0, 1}) {
      StepActions a;
      a.step = step;
      a.rank = rank;
      a.world_size = 2;
      apply_all(faults, Hook::after_backward, a);
      EXPECT_FALSE(a.scheduler_frozen);
      apply_all(faults, Hook::before_optimizer, a);
      EXPECT_TRUE(a.scheduler_frozen) << step << " " << rank;
    }
  }
  // Nothing else is touched.
  StepActions a;
  a.step = 10;
  apply_all(faults, Hook::before_optimizer, a);
  EXPECT_FALSE(a.zero_grads);
  EXPECT_FALSE(a.skip_backward);
  EXPECT_EQ(a.batch_index, -1);
}

// --- Fault base: active() ---------------------------------------------------------------------

FaultSpec spec_at(int64_t at, int64_t lifetime = -1, int rank = -1) {
  FaultSpec f;
  f.kind = "zero_grad_rank";
  f.mode = "zeroed_buffer";
  f.at = at;
  f.lifetime_steps = lifetime;
  f.target_rank = rank;
  f.line = 9;
  return f;
}

Scenario seeded(uint64_t seed) {
  Scenario s;
  s.seed = seed;
  s.world_size = 4;
  s.steps = 1000;
  return s;
}

TEST(Fault, ActiveFromAtUntilEnd) {
  Fault f(spec_at(10), seeded(1));
  EXPECT_FALSE(f.active(9, 0));
  EXPECT_TRUE(f.active(10, 0));
  EXPECT_TRUE(f.active(10, 3));
  EXPECT_TRUE(f.active(1000, 1));
  EXPECT_EQ(f.first_active_step(), 10);
  FaultTruth t = f.truth();
  EXPECT_EQ(t.active_from, 10);
  EXPECT_EQ(t.onset_step, 10);
  EXPECT_EQ(t.rank, -1);
  EXPECT_EQ(t.kind, "zero_grad_rank");
}

TEST(Fault, LifetimeSteps) {
  Fault f(spec_at(10, 3), seeded(1));
  EXPECT_FALSE(f.active(9, 0));
  EXPECT_TRUE(f.active(10, 0));
  EXPECT_TRUE(f.active(12, 0));
  EXPECT_FALSE(f.active(13, 0));
  EXPECT_FALSE(f.active(500, 0));
}

TEST(Fault, TargetRank) {
  Fault f(spec_at(10, -1, 1), seeded(1));
  EXPECT_TRUE(f.targets(1));
  EXPECT_FALSE(f.targets(0));
  EXPECT_FALSE(f.active(10, 0));
  EXPECT_TRUE(f.active(10, 1));
  EXPECT_FALSE(f.active(9, 1));
  EXPECT_FALSE(f.active(10, 2));
  EXPECT_EQ(f.truth().rank, 1);
}

// Steps at which a range fault with lifetime 1 is active: exactly its chosen onsets.
std::set<int64_t> onsets(uint64_t seed, double probability, int index = 0) {
  FaultSpec s = spec_at(-1, 1);
  s.range_start = 100;
  s.range_end = 300;
  s.range_every = 10;
  s.probability = probability;
  s.index = index;
  Fault f(s, seeded(seed));
  std::set<int64_t> out;
  for (int64_t step = 1; step <= 400; ++step)
    if (f.active(step, 0)) out.insert(step);
  if (!out.empty()) {
    EXPECT_EQ(f.first_active_step(), *out.begin());
  }
  return out;
}

TEST(Fault, RangeWithProbabilityIsSeededAndDeterministic) {
  std::set<int64_t> a = onsets(7, 0.5);
  EXPECT_EQ(a, onsets(7, 0.5));  // same seed: same onsets
  EXPECT_FALSE(a.empty());
  EXPECT_LT(a.size(), 21u);
  for (int64_t s : a) {
    EXPECT_GE(s, 100);
    EXPECT_LE(s, 300);
    EXPECT_EQ(s % 10, 0) << s;  // only candidates start, start + every, ...
  }
  // Across seeds the draws differ.
  int differing = 0;
  for (uint64_t seed = 8; seed < 18; ++seed) differing += onsets(seed, 0.5) != a;
  EXPECT_GE(differing, 9);
  // Probability 1: every candidate.
  std::set<int64_t> all = onsets(7, 1.0);
  EXPECT_EQ(all.size(), 21u);
  EXPECT_EQ(*all.begin(), 100);
  EXPECT_EQ(*all.rbegin(), 300);
}

TEST(Fault, RangeUntilEndIsActiveFromTheFirstOnset) {
  FaultSpec s = spec_at(-1);
  s.range_start = 100;
  s.range_end = 300;
  s.range_every = 10;
  s.probability = 0.5;
  Fault f(s, seeded(7));
  int64_t first = f.first_active_step();
  ASSERT_GE(first, 100);
  EXPECT_FALSE(f.active(first - 1, 0));
  EXPECT_TRUE(f.active(first, 0));
  EXPECT_TRUE(f.active(999, 0));
  EXPECT_EQ(first, *onsets(7, 0.5).begin());
}

}  // namespace
}  // namespace flatline
