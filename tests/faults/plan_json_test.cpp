// The probe's plan (faults/plan_json.h, docs/DESIGN.md §16): RunPlan's actions per rank and step, equal
// steps merged, a cycle's batches one by one, the lr factor of a schedule sized too short; and the
// loader's `trainer:` key.
#include "faults/plan_json.h"
#include "faults/scenario_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

namespace flatline {
namespace {

const char* kHead = "name: p\nworld_size: 2\nsteps: 40\nschedule: {kind: cosine, warmup: 5}\n"
                    "trainer: {command: \"python train.py\"}\n";

nlohmann::json plan_of(const std::string& faults, const std::string& extra = "") {
  return nlohmann::json::parse(
      plan_json(load_scenario_text(std::string(kHead) + extra + faults + "expect: {cause: healthy}\n", "/x/s.yaml")));
}

TEST(PlanJson, ARankFaultIsOneMergedRunOnItsRankOnly) {
  const auto p = plan_of("faults: [{kind: zero_grad_rank, at: 25, target: {rank: 1}, params: {mode: zeroed_buffer}}]\n");
  EXPECT_EQ(p["format"], kPlanFormat);
  EXPECT_EQ(p["world_size"], 2);
  EXPECT_EQ(p["steps"], 40);
  ASSERT_EQ(p["actions"].size(), 1u);
  EXPECT_EQ(p["actions"][0], nlohmann::json({{"rank", 1}, {"from", 25}, {"to", 40}, {"zero_grads", true}}));
  EXPECT_TRUE(p["lr_factor"].empty());
}

TEST(PlanJson, ACycleNamesEachReplayedBatch) {
  const auto p = plan_of("faults: [{kind: data_replay, at: 20, params: {mode: cycle_window, window: 3}}]\n");
  std::vector<int64_t> rank0;
  for (const auto& a : p["actions"]) {
    EXPECT_EQ(a["from"], a["to"]);
    if (a["rank"] == 0) rank0.push_back(a["batch_index"]);
  }
  // steps 20..22 train their own batches 19..21; from 23 the cycle comes again: 19, 20, 21, 19, ...
  ASSERT_EQ(rank0.size(), 18u);  // steps 23..40
  EXPECT_EQ(std::vector<int64_t>(rank0.begin(), rank0.begin() + 4), (std::vector<int64_t>{19, 20, 21, 19}));
  EXPECT_EQ(p["actions"].size(), 36u);  // both ranks
}

TEST(PlanJson, AScheduleSizedTooShortIsAFactorReachingZeroAtItsOnset) {
  const auto p = plan_of("faults: [{kind: lr_zero, at: 30, params: {mode: schedule_total_too_short}}]\n");
  const auto& f = p["lr_factor"];
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front()[0], 7);  // warmup 5: steps 1..6 use lr(0..5), the same in both schedules
  double prev = 1;
  for (const auto& sf : f) {
    const double x = sf[1];
    EXPECT_LE(x, prev + 1e-12);
    prev = x;
    if (sf[0] >= 30) EXPECT_EQ(x, 0.0) << "step " << sf[0];
  }
  EXPECT_EQ(f.back()[0], 40);
}

TEST(PlanJson, TheTrainersKeyResolvesItsDirectoryAndRefusesOwnTrainerKeys) {
  const Scenario s = load_scenario_text(std::string(kHead) + "expect: {cause: healthy}\n", "/x/y/s.yaml");
  EXPECT_EQ(s.trainer.command, "python train.py");
  EXPECT_EQ(s.trainer.cwd, "/x/y");
  const Scenario t = load_scenario_text(
      "name: p\ntrainer: {command: \"python t.py\", cwd: ../z}\nexpect: {cause: healthy}\n", "/x/y/s.yaml");
  EXPECT_EQ(t.trainer.cwd, "/x/z");
  for (const char* key : {"model: {kind: cnn}", "eval: {every: 5}", "optimizer: {lr: 0.1}", "batch_size: 4"}) {
    try {
      load_scenario_text(std::string(kHead) + key + "\nexpect: {cause: healthy}\n", "/x/s.yaml");
      ADD_FAILURE() << key << " was accepted";
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find("external 'trainer'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("/x/s.yaml:"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(load_scenario_text("name: p\ntrainer: {command: \" \"}\nexpect: {cause: healthy}\n", "s.yaml"),
               ScenarioError);
  EXPECT_THROW(load_scenario_text("name: p\ntrainer: {cwd: a}\nexpect: {cause: healthy}\n", "s.yaml"), ScenarioError);
}

// A restart in an external job: the probe asks for checkpoints and stops the job; the plan says from
// which checkpoint it resumes and what the faults change about that resume (ResumeActions).
TEST(PlanJson, ARestartSaysItsCheckpointAndWhatTheFaultsChangeAtTheResume) {
  const std::string restart = "checkpoint: {every: 10}\nrestart: {at: 35}\n";
  const auto healthy = plan_of("", restart);
  EXPECT_EQ(healthy["checkpoint_every"], 10);
  EXPECT_EQ(healthy["restart_at"], 35);
  EXPECT_EQ(healthy["resume"], nlohmann::json({{"from_step", 30}, {"restore_sampler", true}, {"finish_scheduler", false}}));
  const auto replay = plan_of("faults: [{kind: data_replay, at: 35, params: {mode: resume_drops_sampler_state}}]\n", restart);
  EXPECT_EQ(replay["resume"], nlohmann::json({{"from_step", 30}, {"restore_sampler", false}, {"finish_scheduler", false}}));
  const auto lr = plan_of("faults: [{kind: lr_zero, at: 35, params: {mode: finished_schedule_on_resume}}]\n", restart);
  EXPECT_EQ(lr["resume"], nlohmann::json({{"from_step", 30}, {"restore_sampler", true}, {"finish_scheduler", true}}));
  const auto none = plan_of("");
  EXPECT_EQ(none["checkpoint_every"], 0);
  EXPECT_EQ(none["restart_at"], -1);
  EXPECT_FALSE(none.contains("resume"));
  // the resolved scenario keeps them, and a restart still needs a checkpoint to resume from
  const Scenario s = load_scenario_text(std::string(kHead) + restart + "expect: {cause: healthy}\n", "/x/s.yaml");
  const Scenario back = load_scenario_text(to_yaml(s), "/x/s.yaml");
  EXPECT_EQ(back.checkpoint_every, 10);
  EXPECT_EQ(back.restart_at, 35);
  EXPECT_THROW(load_scenario_text(std::string(kHead) + "restart: {at: 35}\nexpect: {cause: healthy}\n", "s.yaml"),
               ScenarioError);
}

TEST(PlanJson, TheResolvedScenarioKeepsItsTrainer) {
  const Scenario s = load_scenario_text(std::string(kHead) + "expect: {cause: healthy}\n", "/x/s.yaml");
  const Scenario back = load_scenario_text(to_yaml(s), "/elsewhere/s.yaml");
  EXPECT_EQ(back.trainer.command, s.trainer.command);
  EXPECT_EQ(back.trainer.cwd, "/x");
}

}  // namespace
}  // namespace flatline
