// Where a drill's run comes from: the seed's draw over scenarios/drill (every cause and look-alike, the
// plateau step in range, the rank at fault), the variant moved to the shape (exact fields, through the
// loader and the fault registry), the refused shapes, the prompt, and a simulated drill run that is the
// same for the same seed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "faults/effects.h"
#include "faults/scenario_file.h"
#include "report/drill_run.h"

namespace flatline {
namespace {

std::string drill_dir() { return std::string(FLATLINE_SOURCE_DIR) + "/scenarios/drill"; }

ScenarioText file(const std::string& name) {
  const std::string path = drill_dir() + "/" + name;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return {path, ss.str()};
}

std::vector<ScenarioText> all_files() {
  std::vector<ScenarioText> out;
  for (const auto& e : std::filesystem::directory_iterator(drill_dir()))
    if (e.path().extension() == ".yaml") out.push_back(file(e.path().filename().string()));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DrillRun, TheVariantIsMovedToTheShapeAndLoadsAgain) {
  const ScenarioText f = file("data-replay-resume-drops-sampler.yaml");
  const Scenario s = load_scenario_text(f.second, f.first);
  const Scenario v = drill_variant(s, {16, 2000}, 1400, 5);
  EXPECT_EQ(v.world_size, 16);
  EXPECT_EQ(v.steps, 2000);
  EXPECT_EQ(v.checkpoint_every, 40);   // 1000 x 2000 / 50000
  EXPECT_EQ(v.eval_every, 80);
  EXPECT_EQ(v.schedule.warmup, 80);
  EXPECT_EQ(v.schedule.total, 4000);
  ASSERT_EQ(v.faults.size(), 1u);
  EXPECT_EQ(v.faults[0].at, 1400);     // the first event moves to the plateau step
  EXPECT_EQ(v.restart_at, 1417);       // 437 steps after it in the file, x 0.04
  EXPECT_TRUE(v.fleet_only);
  EXPECT_EQ(v.name, s.name);
  EXPECT_NE(v.source.find("(drill variant: 16 ranks, 2000 steps, plateau at step 1400)"), std::string::npos);
  const auto truth = RunPlan(v).truths().front();
  EXPECT_EQ(truth.active_from, 1401);  // the checkpoint at 1400 is where the resumed run starts over
  EXPECT_TRUE(truth.at_resume);
}

TEST(DrillRun, TheRankAtFaultAndTheScheduleFollowTheShape) {
  const ScenarioText z = file("zero-grad-rank-zeroed-buffer.yaml");
  const Scenario v = drill_variant(load_scenario_text(z.second, z.first), {64, 5000}, 3333, 17);
  EXPECT_EQ(v.faults[0].target_rank, 17);
  EXPECT_EQ(v.expect.rank, 17);
  EXPECT_EQ(v.faults[0].at, 3333);
  const ScenarioText l = file("lr-zero-schedule-too-short.yaml");
  const Scenario lv = drill_variant(load_scenario_text(l.second, l.first), {64, 5000}, 3100, 0);
  EXPECT_EQ(RunPlan(lv).truths().front().onset_step, 3100);  // lr reaches exactly 0 at the plateau step
  const ScenarioText c = file("healthy-cosine-tail.yaml");
  const Scenario cv = drill_variant(load_scenario_text(c.second, c.first), {64, 5000}, 3100, 0);
  EXPECT_EQ(cv.schedule.total, 5000);  // nothing to move; the cosine still spans the run
  EXPECT_EQ(cv.restart_at, -1);
}

TEST(DrillRun, TheSeedDrawsEveryCauseAndLookAlikeEvenly) {
  const auto files = all_files();
  ASSERT_GE(files.size(), 12u);
  std::map<std::string, int> causes;
  std::set<std::string> drawn;
  const DrillShape shape{64, 50000};
  for (uint64_t seed = 0; seed < 240; ++seed) {
    const DrillPlan p = plan_drill(files, seed, shape);
    ++causes[p.cause];
    drawn.insert(p.source);
    EXPECT_GE(p.plateau_step, 30000);
    EXPECT_LT(p.plateau_step, 40000);
    EXPECT_EQ(p.scenario.seed, seed);
    EXPECT_EQ(p.causes, 6u);
    EXPECT_EQ(p.files, files.size());
  }
  ASSERT_EQ(causes.size(), 6u);  // the five causes and healthy
  for (const auto& [c, n] : causes) {
    EXPECT_GE(n, 20) << c;  // 40 expected of each; a binomial's 3 sigma is 18
    EXPECT_LE(n, 60) << c;
  }
  EXPECT_EQ(drawn.size(), files.size());
  const DrillPlan a = plan_drill(files, 77, shape), b = plan_drill(files, 77, shape);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.plateau_step, b.plateau_step);
  EXPECT_EQ(to_yaml(a.scenario), to_yaml(b.scenario));
}

TEST(DrillRun, ShapesTooSmallForTheQuestionAreRefused) {
  const auto f = file("healthy-restart.yaml");
  try {
    plan_drill_of(f, 1, {1, 50000});
    FAIL() << "one rank accepted";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "--ranks 1: a drill needs at least 2 ranks");
  }
  EXPECT_THROW(plan_drill_of(f, 1, {64, 999}), ScenarioError);
  EXPECT_THROW(plan_drill({}, 1, {64, 5000}), ScenarioError);
  EXPECT_NO_THROW(plan_drill_of(f, 1, {kDrillMinRanks, kDrillMinSteps}));
}

TEST(DrillRun, ThePromptNamesTheStepAsADashboardWould) {
  EXPECT_EQ(drill_prompt(37412),
            "\"Training loss went flat at step 37k after descending normally. Walk me through how you debug it.\"");
  EXPECT_EQ(drill_prompt(3072).substr(0, 41), "\"Training loss went flat at step 3072 aft");
  EXPECT_EQ(drill_prompt(-1).substr(0, 40), "\"Training loss went flat after descendin");
}

TEST(DrillRun, ASimulatedRunIsTheSameForTheSameSeed) {
  const auto plan = plan_drill_of(file("zero-grad-rank-skipped-backward.yaml"), 9, {64, 2000});
  const DrillRun a = simulate_drill(plan, 9, std::launch::deferred), b = simulate_drill(plan, 9, std::launch::deferred);
  ASSERT_TRUE(a.manifest.has_value());
  EXPECT_EQ(a.manifest->faults.front().rank, plan.scenario.faults.front().target_rank);
  EXPECT_EQ(a.summary->world(), 64);
  EXPECT_EQ(a.summary->last_step(), 2000);
  ASSERT_EQ(a.summary->rows().size(), b.summary->rows().size());
  EXPECT_EQ(a.summary->rows().back().loss, b.summary->rows().back().loss);
  EXPECT_EQ(a.summary->records(), b.summary->records());
  const Diagnosis d = a.diagnosis.get();
  EXPECT_EQ(d.cause, "zero_grad_rank");
  EXPECT_EQ(d.rank, plan.scenario.faults.front().target_rank);
  EXPECT_EQ(a.origin.find("zero-grad-rank-skipped-backward.yaml") != std::string::npos, true);  // a given file is named
  const DrillPlan drawn = plan_drill(all_files(), 9, {64, 2000});
  const DrillRun c = simulate_drill(drawn, 9, std::launch::deferred);
  EXPECT_EQ(c.origin,
            "the run: simulated by the fleet simulator (no training), 64 ranks x 2000 steps, drawn by seed 9 from " +
                std::to_string(all_files().size()) + " drill scenarios of 6 causes and look-alikes");
  EXPECT_EQ(c.prompt.find(c.name), std::string::npos);
}

}  // namespace
}  // namespace flatline
