// The plan and the verdict of a confirmation (confirm/confirm.h) on synthetic records with exact values:
// which checkpoint, which steps, which series; when the control reproduces the run; the paired and
// unpaired margins; every way to be ambiguous; confirm.json read back.
#include <gtest/gtest.h>

#include <cmath>

#include "confirm/confirm.h"
#include "faults/scenario_file.h"

namespace flatline {
namespace {

Scenario scenario(const std::string& extra = "") {
  return load_scenario_text("name: t\nseed: 1\nworld_size: 2\nsteps: 240\nbatch_size: 16\n" + extra +
                                "expect: {cause: healthy}\n",
                            "c.yaml");
}

// Rank 0's step record of step `step` (16 samples a step), trained on batch `batch`.
Record step_rec(int64_t step, double loss, uint64_t batch, double lr = 1e-3) {
  Record r;
  r.kind = RecordKind::step;
  r.step = step;
  r.loss = r.loss_avg = loss;
  r.batch_hash = batch;
  r.lr = lr;
  r.samples_seen = step * 16;
  return r;
}

// A run descending to `floor` with a +-0.01 alternation (the batches' own spread), steps [from, to].
std::vector<Record> run(int64_t from, int64_t to, double floor, double offset = 0, uint64_t batch0 = 1000) {
  std::vector<Record> v;
  for (int64_t k = from; k <= to; ++k)
    v.push_back(step_rec(k, floor + 20.0 / k + (k % 2 ? 0.01 : -0.01) + offset, batch0 + static_cast<uint64_t>(k)));
  return v;
}

Diagnosis diagnosis(const std::string& cause, int64_t onset, int rank = -1) {
  Diagnosis d;
  d.cause = cause;
  d.rank = rank;
  d.onset_step = onset;
  d.detected_step = onset + 1;
  return d;
}

ReplayRun replay(std::vector<Record> rank0, std::string error = "") {
  ReplayRun r;
  r.ran = true;
  r.error = std::move(error);
  r.rank0 = std::move(rank0);
  return r;
}

TEST(ConfirmPlan, NothingToConfirm) {
  const Scenario s = scenario();
  const std::vector<Record> rs = run(1, 240, 2.0);
  EXPECT_EQ(plan_confirmation(s, diagnosis("healthy", -1), rs, {}, {}).nothing,
            "the diagnosis is healthy: nothing to confirm");
  EXPECT_NE(plan_confirmation(s, diagnosis("straggler", 50, 1), rs, {}, {}).nothing.find("fleet finding"),
            std::string::npos);
  EXPECT_NE(plan_confirmation(s, diagnosis("what", 50), rs, {}, {}).nothing.find("not a cause"), std::string::npos);
  EXPECT_NE(plan_confirmation(s, diagnosis("unexplained_plateau", 1), rs, {}, {}).nothing.find("no named cause to repair"),
            std::string::npos);
  EXPECT_NE(plan_confirmation(s, diagnosis("zero_grad_rank", 50), rs, {}, {}).nothing.find("names none"),
            std::string::npos);
  EXPECT_NE(plan_confirmation(s, diagnosis("zero_grad_rank", 50, 2), rs, {}, {}).nothing.find("rank 2 of 2"),
            std::string::npos);
  EXPECT_NE(plan_confirmation(s, diagnosis("lr_zero", 300), rs, {}, {}).nothing.find("past the scenario's last step"),
            std::string::npos);
  Diagnosis none = diagnosis("lr_zero", -1);
  none.detected_step = -1;
  EXPECT_NE(plan_confirmation(s, none, rs, {}, {}).nothing.find("no onset"), std::string::npos);
  none.detected_step = 70;  // no onset estimate: the detection step
  EXPECT_EQ(plan_confirmation(s, none, rs, {}, {}).onset, 70);
}

TEST(ConfirmPlan, ReplaysFromTheLatestCheckpointBeforeTheOnset) {
  const Scenario s = scenario();
  std::vector<Record> rs = run(1, 240, 2.0);
  const ConfirmPlan p = plan_confirmation(s, diagnosis("lr_zero", 158), rs, {80, 160, 240}, {});
  EXPECT_TRUE(p.nothing.empty());
  EXPECT_EQ(p.checkpoint, 80);
  EXPECT_EQ(p.branch, 157);
  EXPECT_TRUE(p.needs_prefix());
  EXPECT_EQ(p.prefix_start, ReplayStart::carry_on);
  EXPECT_EQ(p.branch_start, ReplayStart::carry_on);
  EXPECT_EQ(p.end, 240);  // as long as the plateau lasted: to the scenario's end
  EXPECT_EQ(p.plateau_steps(), 83);
  EXPECT_EQ(p.compared, 20);
  EXPECT_FALSE(p.held_out);
  EXPECT_EQ(p.repair.cause, "lr_zero");
  EXPECT_EQ(p.repair.from_step, 158);
  EXPECT_EQ(p.repair.lr_before, 1e-3);  // the lr logged at step 157

  // a checkpoint right before the onset: no prefix; one the run resumed from: the replay resumes too
  Record stop;  // the first processes stopped for the scenario's restart ...
  stop.kind = RecordKind::event;
  stop.name = "stop_for_restart";
  stop.step = 240;
  rs.push_back(stop);
  Record resume;  // ... and new ones resumed from the checkpoint
  resume.kind = RecordKind::event;
  resume.name = "resume";
  resume.step = 157;
  resume.detail = "from checkpoint step 157";
  rs.push_back(resume);
  const ConfirmPlan q = plan_confirmation(s, diagnosis("lr_zero", 158), rs, {157}, {});
  EXPECT_FALSE(q.needs_prefix());
  EXPECT_EQ(q.branch_start, ReplayStart::resume);
  rs.erase(rs.end() - 2);  // no earlier process ended: the `resume` is a replay's own start, no resume
  rs.back().detail = "from checkpoint step 157, carrying on (a replay)";
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 158), rs, {157}, {}).branch_start, ReplayStart::carry_on);

  // no checkpoint: from step 0; an onset at step 1: no prefix at all
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 120), rs, {}, {}).prefix_start, ReplayStart::fresh);
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 120), rs, {200}, {}).checkpoint, -1);
  const ConfirmPlan first = plan_confirmation(s, diagnosis("lr_zero", 1), rs, {}, {});
  EXPECT_EQ(first.branch, 0);
  EXPECT_FALSE(first.needs_prefix());

  ConfirmOptions o;  // --steps and --last
  o.steps = 30;
  o.last = 50;
  const ConfirmPlan r = plan_confirmation(s, diagnosis("lr_zero", 120), rs, {}, o);
  EXPECT_EQ(r.end, 149);
  EXPECT_EQ(r.compared, 15);  // at most half the branch
  o.steps = 1000;
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 120), rs, {}, o).end, 240);
}

// A checkpoint the launcher asked for when the detector fired (checkpoints/live-step-N, docs/DESIGN.md §8)
// lies a few steps after the onset: the branches start there and nothing is re-trained, so the replays
// train at most twice the plateau; the repair still starts from the onset's values (lr_before).
TEST(ConfirmPlan, BranchesFromALiveCheckpointNearTheFindingWithoutAPrefix) {
  const Scenario s = scenario();
  std::vector<Record> rs = run(1, 240, 2.0);
  for (auto& r : rs) r.lr = 1e-3 * static_cast<double>(240 - r.step) / 240;
  const ConfirmPlan p = plan_confirmation(s, diagnosis("lr_zero", 158), rs, {80, 160, 240}, {}, {165});
  EXPECT_EQ(p.checkpoint, 165);
  EXPECT_EQ(p.branch, 165);
  EXPECT_FALSE(p.needs_prefix());
  EXPECT_EQ(p.branch_start, ReplayStart::carry_on);
  EXPECT_EQ(p.end, 240);
  EXPECT_EQ(p.branch_steps(), 75);
  EXPECT_EQ(p.plateau_steps(), 83);
  EXPECT_EQ(p.replayed_steps(), 150);
  EXPECT_EQ(p.compared, 20);
  EXPECT_EQ(p.repair.from_step, 158);
  EXPECT_EQ(p.repair.lr_before, 1e-3 * 83 / 240);  // logged at step 157, the step before the onset

  // the first live one that leaves the branches 2K steps; one too late for that is no branch point
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 158), rs, {80}, {}, {170, 165, 210}).branch, 165);
  const ConfirmPlan late = plan_confirmation(s, diagnosis("lr_zero", 158), rs, {80}, {}, {210});
  EXPECT_EQ(late.branch, 157);
  EXPECT_EQ(late.checkpoint, 80);
  EXPECT_TRUE(late.needs_prefix());
  EXPECT_EQ(late.replayed_steps(), 77 + 2 * 83);
  ConfirmOptions o;
  o.last = 10;  // K = 10: 30 steps after it are enough
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 158), rs, {80}, o, {210}).branch, 210);
  // a checkpoint at the branch point wins (the repair from the onset, no prefix); a live one before the
  // onset shortens the prefix
  EXPECT_EQ(plan_confirmation(s, diagnosis("lr_zero", 158), rs, {157}, {}, {165}).branch, 157);
  const ConfirmPlan before = plan_confirmation(s, diagnosis("lr_zero", 158), rs, {80}, {}, {120});
  EXPECT_EQ(before.checkpoint, 120);
  EXPECT_EQ(before.branch, 157);
  EXPECT_EQ(before.replayed_steps(), 37 + 2 * 83);
}

TEST(ConfirmPlan, ComparesTheHeldOutLossWhereTheRunTrainsBatchesAgain) {
  const Scenario s = scenario();
  std::vector<Record> rs = run(1, 240, 2.0);
  EXPECT_FALSE(plan_confirmation(s, diagnosis("data_replay", 128), rs, {}, {}).held_out);
  for (auto& r : rs)
    if (r.step >= 120) r.batch_hash = 1120 + (r.step - 120) % 8;  // a cycle of 8 from step 120
  EXPECT_TRUE(plan_confirmation(s, diagnosis("data_replay", 128), rs, {}, {}).held_out);
  // whatever cause the diagnosis names: the series follows from the run's batches
  EXPECT_TRUE(plan_confirmation(s, diagnosis("lr_zero", 128), rs, {}, {}).held_out);
}

TEST(ConfirmJudge, ConfirmsAPairedRepairAndStatesItsNumbers) {
  const Scenario s = scenario();
  const std::vector<Record> original = run(1, 240, 2.0);
  const ConfirmPlan p = plan_confirmation(s, diagnosis("lr_zero", 121), original, {}, {});
  const ConfirmResult r = judge(s, p, original, replay(run(1, 120, 2.0)), replay(run(121, 240, 2.0)),
                                replay(run(121, 240, 2.0, -0.05)), {});
  EXPECT_EQ(r.verdict, Verdict::confirmed) << r.reason;
  EXPECT_TRUE(r.control.faithful);
  EXPECT_EQ(r.control.steps, 240);
  EXPECT_EQ(r.control.identical, 240);
  const Comparison& c = r.comparison;
  EXPECT_EQ(c.series, "loss");
  EXPECT_TRUE(c.paired);
  EXPECT_EQ(c.control.n, 20);
  EXPECT_EQ(c.control.first_step, 221);
  EXPECT_EQ(c.control.last_step, 240);
  EXPECT_NEAR(c.difference, 0.05, 1e-12);
  EXPECT_NEAR(c.se, 0.0, 1e-12);       // paired: the batches' spread is gone
  EXPECT_GT(c.control.se, 0.002);      // unpaired it is there
  EXPECT_NEAR(c.threshold, 1e-3 * c.control.mean, 1e-12);  // the minimum effect
  EXPECT_EQ(exit_code(r.verdict), 0);
  EXPECT_NE(to_text(r).find("CONFIRMED"), std::string::npos);
}

TEST(ConfirmJudge, DoesNotConfirmARepairThatChangesNothing) {
  const Scenario s = scenario();
  const std::vector<Record> original = run(1, 240, 2.0);
  const ConfirmPlan p = plan_confirmation(s, diagnosis("data_replay", 121), original, {}, {});
  ConfirmResult r = judge(s, p, original, replay(run(1, 120, 2.0)), replay(run(121, 240, 2.0)),
                          replay(run(121, 240, 2.0)), {});
  EXPECT_EQ(r.verdict, Verdict::not_confirmed);
  EXPECT_EQ(r.comparison.difference, 0.0);
  EXPECT_EQ(exit_code(r.verdict), 1);
  // below by less than the noise (unpaired: other batches)
  r = judge(s, p, original, replay(run(1, 120, 2.0)), replay(run(121, 240, 2.0)),
            replay(run(121, 240, 2.0, -0.002, 5000)), {});
  EXPECT_EQ(r.verdict, Verdict::not_confirmed) << r.reason;
  EXPECT_FALSE(r.comparison.paired);
  EXPECT_NEAR(r.comparison.se, std::sqrt(2.0) * r.comparison.control.se, 1e-12);
  // a repaired run whose loss is no longer finite
  std::vector<Record> nan = run(121, 240, 2.0, -0.05);
  nan.back().loss_avg = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(judge(s, p, original, replay(run(1, 120, 2.0)), replay(run(121, 240, 2.0)), replay(nan), {}).verdict,
            Verdict::not_confirmed);
}

TEST(ConfirmJudge, IsAmbiguousWhenTheControlDoesNotReproduceTheRun) {
  const Scenario s = scenario();
  const std::vector<Record> original = run(1, 240, 2.0);
  const ConfirmPlan p = plan_confirmation(s, diagnosis("lr_zero", 121), original, {}, {});
  const ReplayRun prefix = replay(run(1, 120, 2.0)), repaired = replay(run(121, 240, 2.0, -0.05));
  // another loss level: beyond the noise
  ConfirmResult r = judge(s, p, original, prefix, replay(run(121, 240, 2.0, 0.03)), repaired, {});
  EXPECT_EQ(r.verdict, Verdict::ambiguous);
  EXPECT_NE(r.reason.find("does not reproduce"), std::string::npos);
  EXPECT_EQ(exit_code(r.verdict), 2);
  // another batch
  std::vector<Record> other = run(121, 240, 2.0);
  other[10].batch_hash = 7;
  EXPECT_NE(judge(s, p, original, prefix, replay(other), repaired, {}).reason.find("another batch at step 131"),
            std::string::npos);
  // it stopped early where the run did not
  EXPECT_NE(judge(s, p, original, prefix, replay(run(121, 200, 2.0)), repaired, {}).reason.find("steps 1..240 (240)"),
            std::string::npos);
  // the prefix failed
  EXPECT_NE(judge(s, p, original, replay({}, "rank 1 exited with status 2"), replay(run(121, 240, 2.0)), repaired, {})
                .reason.find("rank 1 exited"),
            std::string::npos);
  // float noise only (another device): within the noise is faithful
  std::vector<Record> noisy = run(121, 240, 2.0);
  for (size_t i = 0; i < noisy.size(); ++i) *noisy[i].loss_avg += (i % 2 ? 1e-7 : -1e-7);
  r = judge(s, p, original, prefix, replay(noisy), repaired, {});
  EXPECT_TRUE(r.control.faithful) << r.control.detail;
  EXPECT_EQ(r.control.identical, 120);
  EXPECT_EQ(r.verdict, Verdict::confirmed);
}

TEST(ConfirmJudge, AHungRunComparesTheControlsLastStepsBeforeTheHang) {
  const Scenario s = scenario();
  const std::vector<Record> original = run(1, 119, 2.0);  // the run hung in step 120
  const ConfirmPlan p = plan_confirmation(s, diagnosis("run_not_alive", 120), original, {}, {});
  const ConfirmResult r = judge(s, p, original, replay(run(1, 119, 2.0)), replay({}, "rank 0 exited with status 2"),
                                replay(run(120, 240, 2.0)), {});
  EXPECT_TRUE(r.control.faithful) << r.control.detail;
  EXPECT_EQ(r.verdict, Verdict::confirmed) << r.reason;
  EXPECT_FALSE(r.comparison.paired);
  EXPECT_EQ(r.comparison.control.first_step, 100);
  EXPECT_EQ(r.comparison.control.last_step, 119);
  EXPECT_EQ(r.comparison.repaired.last_step, 240);
  // the repaired hangs too (a repair for another cause): the same steps, not confirmed
  EXPECT_EQ(judge(s, p, original, replay(run(1, 119, 2.0)), replay({}), replay({}), {}).verdict, Verdict::not_confirmed);
}

TEST(ConfirmJudge, AFrozenLoggerIsPairedByTheStepTrained) {
  const Scenario s = scenario();
  std::vector<Record> original = run(1, 240, 2.0);
  for (auto& r : original)
    if (r.step >= 120) r.step = 119, r.loss_avg = 2.5;  // the logged step and loss stop changing
  const ConfirmPlan p = plan_confirmation(s, diagnosis("run_not_alive", 120), original, {}, {});
  const std::vector<Record> control(original.begin() + 119, original.end());
  const ConfirmResult r = judge(s, p, original, replay(std::vector<Record>(original.begin(), original.begin() + 119)),
                                replay(control), replay(run(120, 240, 2.0)), {});
  EXPECT_TRUE(r.control.faithful) << r.control.detail;
  EXPECT_TRUE(r.comparison.paired);
  EXPECT_EQ(r.comparison.control.last_step, 240);
  EXPECT_EQ(r.verdict, Verdict::confirmed);
}

TEST(ConfirmJudge, ComparesHeldOutLossesAndNeedsEnoughOfThem) {
  const Scenario s = scenario();
  std::vector<Record> original = run(1, 240, 2.0);
  for (auto& r : original)
    if (r.step >= 120) r.batch_hash = 1120 + (r.step - 120) % 8;
  const ConfirmPlan p = plan_confirmation(s, diagnosis("data_replay", 128), original, {}, {});
  ASSERT_TRUE(p.held_out);
  auto evals = [](std::vector<Record> v, double level) {
    for (int64_t k = 221; k <= 240; ++k) {
      Record e;
      e.kind = RecordKind::eval;
      e.step = k;
      e.eval_loss = level + 1e-4 * (k % 3);
      v.push_back(e);
    }
    return v;
  };
  const std::vector<Record> ctl(original.begin() + 127, original.end());
  std::vector<Record> rep = run(128, 240, 2.1);  // a higher training loss: fresh batches are not memorised
  const ConfirmResult r = judge(s, p, original, replay(std::vector<Record>(original.begin(), original.begin() + 127)),
                                replay(evals(ctl, 2.6)), replay(evals(rep, 2.55)), {});
  EXPECT_EQ(r.comparison.series, "eval_loss");
  EXPECT_EQ(r.verdict, Verdict::confirmed) << r.reason;
  EXPECT_NEAR(r.comparison.difference, 0.05, 1e-9);
  // without the evaluations there is nothing to compare
  EXPECT_EQ(judge(s, p, original, replay(std::vector<Record>(original.begin(), original.begin() + 127)), replay(ctl),
                  replay(rep), {})
                .verdict,
            Verdict::ambiguous);
}

TEST(ConfirmResultJson, RoundTrips) {
  const Scenario s = scenario();
  const std::vector<Record> original = run(1, 240, 2.0);
  const ConfirmPlan p = plan_confirmation(s, diagnosis("zero_grad_rank", 121, 1), original, {80}, {});
  ConfirmResult r = judge(s, p, original, replay(run(81, 120, 2.0)), replay(run(121, 240, 2.0)),
                          replay(run(121, 240, 2.0, -0.05)), {});
  r.run_dir = "runs/x";
  r.wall_s = 12.5;
  const ConfirmResult b = confirm_from_json(to_json(r), "confirm.json");
  EXPECT_EQ(b.verdict, r.verdict);
  EXPECT_EQ(b.reason, r.reason);
  EXPECT_EQ(b.run_dir, "runs/x");
  EXPECT_EQ(b.plan.checkpoint, 80);
  EXPECT_EQ(b.plan.branch, 120);
  EXPECT_EQ(b.plan.repair.rank, 1);
  EXPECT_EQ(b.repair, r.repair);
  EXPECT_EQ(b.control.identical, r.control.identical);
  EXPECT_EQ(b.comparison.paired, true);
  EXPECT_EQ(b.comparison.difference, r.comparison.difference);
  EXPECT_EQ(b.comparison.control.n, 20);
  EXPECT_EQ(b.wall_s, 12.5);
  EXPECT_THROW(confirm_from_json("{\"verdict\": \"maybe\"}", "c.json"), std::runtime_error);
  EXPECT_THROW(confirm_from_json("[", "c.json"), std::runtime_error);
}

}  // namespace
}  // namespace flatline
