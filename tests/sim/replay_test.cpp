// The replays of a confirmation on the real trainer (2 real ranks over c10d Gloo, a tiny GPT), in both
// step paths (the harness's kernels and ATen's): a run trained in pieces — stopped after a step with a
// checkpoint there, then carried on from it — logs the very step records of the run trained straight,
// also across an fp16 overflow streak and after a resume (whose effects on the plan a carried-on
// checkpoint keeps); and each repair acts where the faults act (confirm/*.cpp, faults/effects.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "faults/intervention.h"
#include "tests/sim/ranks.h"

namespace flatline::test {
namespace {
namespace fs = std::filesystem;

Scenario tiny(const std::string& extra, const std::string& fault = "") {
  return tiny_effect_gpt(extra, fault.empty() ? std::vector<std::string>{} : std::vector<std::string>{fault});
}

std::vector<Record> steps_of(const std::string& dir, int rank) {
  std::vector<Record> out;
  for (const auto& r : read_jsonl(dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
    if (r.kind == RecordKind::step) out.push_back(r);
  return out;
}

// Step records `from`..`to` of a rank's deterministic telemetry (deterministic_steps), by step; a step
// logged twice (a restart re-trains it) keeps its last record.
std::map<int64_t, std::string> steps_between(const std::string& dir, int rank, int64_t from, int64_t to) {
  std::map<int64_t, std::string> out;
  for (const std::string& line : deterministic_steps(dir, rank)) {
    const Record r = parse_record(line, dir, 0);
    if (r.kind == RecordKind::step && r.step >= from && r.step <= to) out[r.step] = line;
  }
  return out;
}

void link_checkpoint(const std::string& from_run, int64_t step, const std::string& to_run) {
  const std::string name = fmt::format("step-{:08d}", step);
  fs::create_directories(to_run + "/checkpoints");
  fs::create_directory_symlink(fs::canonical(from_run + "/checkpoints/" + name), to_run + "/checkpoints/" + name);
}

auto replay_options(bool carry_on, int64_t stop_after, bool checkpoint_at_stop,
                    std::shared_ptr<const Intervention> repair = nullptr) {
  return [=](RankOptions& o) {
    o.carry_on = carry_on;
    o.stop_after = stop_after;
    o.checkpoint_at_stop = checkpoint_at_stop;
    o.repair = repair;
  };
}

class Replay : public ::testing::TestWithParam<const char*> {
 protected:
  Scenario with_kernels(Scenario s) const {
    s.kernels = GetParam();
    return s;
  }
};

// straight 1..12; in pieces: 1..5 (a checkpoint after 5), then 6..12 carried on from it
void expect_pieces_equal_the_straight_run(const Scenario& s, int64_t branch) {
  const std::string straight = temp_dir("straight"), prefix = temp_dir("prefix"), rest = temp_dir("rest");
  const auto a = run_ranks(s, straight);
  run_ranks(s, prefix, false, true, nullptr, replay_options(false, branch, true));
  ASSERT_TRUE(fs::exists(prefix + fmt::format("/checkpoints/step-{:08d}/COMPLETE", branch)));
  link_checkpoint(prefix, branch, rest);
  const auto b = run_ranks(s, rest, false, true, nullptr, replay_options(true, -1, false));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(steps_between(prefix, rank, 1, s.steps), steps_between(straight, rank, 1, branch)) << rank;
    EXPECT_EQ(steps_between(rest, rank, 1, s.steps), steps_between(straight, rank, branch + 1, s.steps)) << rank;
    EXPECT_EQ(b[static_cast<size_t>(rank)].params, a[static_cast<size_t>(rank)].params) << rank;
  }
  EXPECT_EQ(steps_of(rest, 0).front().step, branch + 1);
}

TEST_P(Replay, APrefixAndItsContinuationLogTheStraightRunsRecords) {
  expect_pieces_equal_the_straight_run(with_kernels(tiny("optimizer: {kind: adamw, lr: 3.0e-3}\n")), 5);
}

TEST_P(Replay, ThroughAnFp16OverflowStreakTheScalerStateCarriesOn) {
  expect_pieces_equal_the_straight_run(
      with_kernels(tiny("precision: fp16\n", "{kind: loss_scale_collapse, at: 4, params: {mode: overflow_streak, steps: 4}}")),
      5);
}

// The run restarts after step 8 from its checkpoint at 6 with a finished schedule restored (lr 0 from
// step 7, although the schedule has a floor). Replayed from that checkpoint as the run's own resume to
// step 9, then carried on: the carried-on processes are still resumed ones (lr stays 0, no second stop).
TEST_P(Replay, CarryingOnFromAResumedProcessesCheckpointKeepsWhatTheResumeChanged) {
  const Scenario s = with_kernels(tiny("checkpoint: {every: 3}\nrestart: {at: 8}\nschedule: {kind: cosine, min_lr: 1.0e-4}\n",
                                       "{kind: lr_zero, at: 7, params: {mode: finished_schedule_on_resume}}"));
  const std::string run = temp_dir("restarted"), prefix = temp_dir("resumed"), rest = temp_dir("carried");
  const auto first = run_ranks(s, run);
  ASSERT_TRUE(first[0].stopped_for_restart);
  run_ranks(s, run, /*resume=*/true);
  link_checkpoint(run, 6, prefix);
  run_ranks(s, prefix, /*resume=*/true, true, nullptr, replay_options(false, 9, true));
  link_checkpoint(prefix, 9, rest);
  const auto r = run_ranks(s, rest, false, true, nullptr, replay_options(true, -1, false));
  EXPECT_FALSE(r[0].stopped_for_restart);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(steps_between(prefix, rank, 1, 12), steps_between(run, rank, 7, 9)) << rank;
    EXPECT_EQ(steps_between(rest, rank, 1, 12), steps_between(run, rank, 10, 12)) << rank;
  }
  for (const auto& x : steps_of(rest, 0)) EXPECT_EQ(*x.lr, 0.0) << x.step;
}

std::shared_ptr<const Intervention> repair(const Scenario& s, const char* cause, int64_t from, int rank = -1,
                                           double lr_before = 0) {
  return make_intervention({cause, rank, from, lr_before}, s);
}

// The repaired branch of each cause, carried on from the step before its onset, against the faulty run.
TEST_P(Replay, EachRepairActsWhereItsFaultActs) {
  {  // zero_grad_rank: rank 1's gradient goes into the all-reduce again: the run is the healthy one
    const Scenario healthy = with_kernels(tiny(""));
    const Scenario s = with_kernels(tiny("", "{kind: zero_grad_rank, at: 4, target: {rank: 1}, params: {mode: zeroed_buffer}}"));
    const std::string h = temp_dir("zgr-h"), prefix = temp_dir("zgr-p"), fixed = temp_dir("zgr-r");
    const auto ok = run_ranks(healthy, h);
    run_ranks(s, prefix, false, true, nullptr, replay_options(false, 3, true));
    link_checkpoint(prefix, 3, fixed);
    const auto r = run_ranks(s, fixed, false, true, nullptr, replay_options(true, -1, false, repair(s, "zero_grad_rank", 4, 1)));
    for (const auto& x : steps_of(fixed, 1)) EXPECT_GT(*x.local_grad_norm, 0.0) << x.step;
    EXPECT_EQ(steps_between(fixed, 1, 1, 12), steps_between(h, 1, 4, 12));
    EXPECT_EQ(r[0].params, ok[0].params);
  }
  {  // loss_scale_collapse: the scale starts again at 2^16 and never falls below it; overflows still skip
    const Scenario s = with_kernels(
        tiny("precision: fp16\n", "{kind: loss_scale_collapse, at: 4, params: {mode: overflow_streak, steps: 5}}"));
    const std::string prefix = temp_dir("lsc-p"), fixed = temp_dir("lsc-r");
    run_ranks(s, prefix, false, true, nullptr, replay_options(false, 5, true));  // two overflows in already
    EXPECT_EQ(*steps_of(prefix, 0).back().loss_scale, 65536.0 / 2);
    link_checkpoint(prefix, 5, fixed);
    run_ranks(s, fixed, false, true, nullptr, replay_options(true, -1, false, repair(s, "loss_scale_collapse", 4)));
    for (const auto& x : steps_of(fixed, 0)) {
      EXPECT_EQ(*x.loss_scale, 65536.0) << x.step;
      EXPECT_EQ(*x.skipped, x.step <= 8) << x.step;
    }
  }
  {  // lr_zero: where the too-short schedule reaches 0 the lr is held at the configured floor
    const Scenario s = with_kernels(tiny("schedule: {kind: cosine, min_lr: 2.0e-4}\n",
                                         "{kind: lr_zero, at: 8, params: {mode: schedule_total_too_short}}"));
    const std::string prefix = temp_dir("lr-p"), fixed = temp_dir("lr-r");
    run_ranks(s, prefix, false, true, nullptr, replay_options(false, 6, true));
    link_checkpoint(prefix, 6, fixed);
    run_ranks(s, fixed, false, true, nullptr, replay_options(true, -1, false, repair(s, "lr_zero", 7, -1, 1e-5)));
    for (const auto& x : steps_of(fixed, 0)) EXPECT_EQ(*x.lr, x.step >= 8 ? 2e-4 : *x.lr) << x.step;
    EXPECT_EQ(*steps_of(fixed, 0).back().lr, 2e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Replay, ::testing::Values("flatline", "aten"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace flatline::test
