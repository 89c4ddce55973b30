// The drill driven by scripted answers: on recorded fixture runs, exact scores for the right and wrong
// habits (liveness first, lr and grad read, signals used, time), the missed evidence, the transcript; on
// seeded simulated fleet runs of every drill scenario (64 ranks x 2000 steps), the exact score of each
// cause and look-alike, the data-after-the-restart points, what the views show, and the --explain walk.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "run/causes.h"
#include "report/checklist_walk.h"
#include "report/drill.h"
#include "tests/report/fixtures.h"

namespace flatline::testing {
namespace {

class DrillTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_ = new std::string(write_fixture_suite(scratch_dir("drill")));
    Spec hang;
    hang.steps = 200, hang.seed = 5, hang.hang_at = 150, hang.hang_rank = 1;
    hang_ = new std::string(
        write_run(scratch_dir("drill-hang"), "hang", "hang-fixture", hang, fault("run_not_alive", "hang", 1, 150)));
  }
  // Runs a scripted drill on one fixture; the clock reads 0 at the start and `seconds` at the end.
  static DrillScore play(const std::string& dir, const std::string& script, double seconds = 0,
                         std::string* transcript = nullptr, int* status = nullptr) {
    double now = 0;
    Drill d(recorded_drill(dir), [&now] { return now; });
    now = seconds;
    std::istringstream in(script);
    std::ostringstream out;
    const int st = run_drill(d, in, out, true);
    if (transcript) *transcript = out.str();
    if (status) *status = st;
    return d.score();
  }
  static std::string run(const std::string& name) { return *suite_ + "/" + name; }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*suite_);
    std::filesystem::remove_all(std::filesystem::path(*hang_).parent_path());
  }
  static std::string* suite_;
  static std::string* hang_;
};
std::string* DrillTest::suite_ = nullptr;
std::string* DrillTest::hang_ = nullptr;

TEST_F(DrillTest, TheChecklistInOrderScoresFullMarks) {
  std::string t;
  int st = -1;
  DrillScore s = play(run("a-lr-zero"), "alive\nlr\ngrad\nanswer lr_zero\n", 30, &t, &st);
  EXPECT_EQ(st, 0);
  EXPECT_EQ(s.truth_cause, "lr_zero");
  EXPECT_TRUE(s.cause_right && s.rank_right && s.alive_first && s.read_lr && s.read_grad);
  EXPECT_EQ(s.read, (std::vector<std::string>{"alive", "lr", "grad"}));
  EXPECT_TRUE(s.missed.empty());
  EXPECT_EQ(s.total, 100);
  EXPECT_DOUBLE_EQ(s.seconds, 30);
  EXPECT_NE(t.find("training loss\n"), std::string::npos);
  EXPECT_NE(t.find("drill> alive\nlogged step vs wall time"), std::string::npos);
  EXPECT_NE(t.find("peak lr 0.003 at step 21; last lr 0 at step 200"), std::string::npos);
  EXPECT_NE(t.find("the truth:   lr_zero (mode schedule_total_too_short; active from step 121"), std::string::npos);
  EXPECT_NE(t.find("  - [lr] lr = 0 since step 121"), std::string::npos);
  EXPECT_NE(t.find("  total                  100/100"), std::string::npos);
  // the run's name is hidden until the summary
  EXPECT_EQ(t.find("lr-zero-fixture"), t.find("the run:     lr-zero-fixture") + 13);
}

TEST_F(DrillTest, RightCauseWrongRankModelFirstAndTooManySignals) {
  DrillScore s = play(run("b-zero-grad-rank"), "lr\ngrad\nalive\nranks\ndata\nanswer zero_grad_rank 0\n");
  EXPECT_TRUE(s.cause_right);
  EXPECT_FALSE(s.rank_right);
  EXPECT_FALSE(s.alive_first);
  EXPECT_EQ(s.cause_pts, 25);
  EXPECT_EQ(s.alive_pts, 0);
  EXPECT_EQ(s.signals_pts, 7);  // 5 signals
  EXPECT_EQ(s.total, 25 + 0 + 10 + 10 + 7 + 5);
  EXPECT_EQ(play(run("b-zero-grad-rank"), "alive\nlr\ngrad\nranks\nanswer zero_grad_rank 1\n").total, 100);
}

TEST_F(DrillTest, WrongAnswerSlowAndTheMissedEvidence) {
  std::string t;
  int st = -1;
  DrillScore s = play(run("c-data-replay"), "alive\n\n# a comment\nbogus\nanswer healthy\n", 200, &t, &st);
  EXPECT_EQ(st, 1);
  EXPECT_FALSE(s.cause_right);
  EXPECT_EQ(s.missed, (std::vector<std::string>{"data"}));
  EXPECT_EQ(s.time_pts, 3);
  EXPECT_EQ(s.total, 0 + 15 + 0 + 0 + 10 + 3);
  EXPECT_NE(t.find("unknown command 'bogus'"), std::string::npos);
  EXPECT_NE(t.find("evidence you missed: data\n"), std::string::npos);
  EXPECT_NE(t.find("  - [data] batch of step 122 identical to step 102"), std::string::npos);
  EXPECT_EQ(play(run("c-data-replay"), "alive\nlr\ngrad\ndata\nanswer data_replay\n", 400).total, 95);
}

TEST_F(DrillTest, NoAnswerScoresZeroAndUnknownCausesAreRefused) {
  std::string t;
  int st = -1;
  DrillScore s = play(run("d-healthy"), "alive\nanswer flat\nanswer zero_grad_rank x\nlr\n", 0, &t, &st);
  EXPECT_EQ(st, 1);
  EXPECT_FALSE(s.answered);
  EXPECT_EQ(s.total, 0);
  EXPECT_NE(t.find("unknown cause 'flat'"), std::string::npos);
  EXPECT_NE(t.find("rank must be a number, not 'x'"), std::string::npos);
  EXPECT_NE(t.find("(end of input)"), std::string::npos);
  EXPECT_NE(t.find("score: 0/100 (no answer given)"), std::string::npos);
  EXPECT_EQ(play(run("d-healthy"), "alive\nlr\ngrad\nanswer healthy\n").total, 100);
  EXPECT_EQ(play(run("d-healthy"), "quit\nanswer healthy\n").total, 0);
}

TEST_F(DrillTest, AHungRankShowsInTheLivenessView) {
  std::string t;
  DrillScore s = play(*hang_, "alive\nlr\ngrad\nanswer run_not_alive\n", 0, &t);
  EXPECT_EQ(s.total, 100);
  EXPECT_NE(t.find("* heartbeats   o rank 0\n"), std::string::npos);
  EXPECT_NE(t.find("\n1           149"), std::string::npos) << t;
  EXPECT_NE(t.find("rank 0: error at t="), std::string::npos);
  EXPECT_NE(t.find("  - [alive] "), std::string::npos);
}

// ---- simulated fleet runs (report/drill_run.h) -----------------------------------------------------

struct Played {
  DrillScore score;
  std::string transcript;
  int status = -1;
  int truth_rank = -1;
};

// Simulates scenarios/drill/<name> for `seed` at 64 x 2000 and plays `script`; the clock reads `seconds`
// at the answer. Also checks that the checklist walk over the run's summary names the truth.
Played play_sim(const std::string& name, uint64_t seed, const std::string& script, double seconds = 10,
                bool explain = false) {
  const std::string path = std::string(FLATLINE_SOURCE_DIR) + "/scenarios/drill/" + name;
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  DrillRun run = simulate_drill(plan_drill_of({path, text.str()}, seed, {64, 2000}), seed, std::launch::deferred);
  Played p;
  const FaultTruth* truth = run.manifest->faults.empty() ? nullptr : &run.manifest->faults.front();
  p.truth_rank = truth ? truth->rank : -1;
  int walk_rank = -1;
  const std::string walk = walk_verdict(walk_checklist(*run.summary), &walk_rank);
  EXPECT_EQ(walk, truth ? truth->cause_id() : "healthy") << name;
  EXPECT_EQ(walk_rank, names_rank(walk) ? p.truth_rank : -1) << name;
  double now = 0;
  Drill d(std::move(run), [&now] { return now; }, DrillOptions{explain});
  now = seconds;
  std::istringstream in(script);
  std::ostringstream out;
  p.status = run_drill(d, in, out, true);
  p.transcript = out.str();
  p.score = d.score();
  return p;
}

bool has(const Played& p, const std::string& what) { return p.transcript.find(what) != std::string::npos; }

TEST(DrillSimulated, AHangIsFoundByLivenessFirst) {
  Played p = play_sim("run-not-alive-hang.yaml", 4, "alive\nlr\ngrad\nanswer run_not_alive\n");
  EXPECT_EQ(p.score.truth_cause, "run_not_alive");
  EXPECT_EQ(p.score.total, 100);
  EXPECT_EQ(p.score.max_total, 100);
  EXPECT_EQ(p.status, 0);
  EXPECT_TRUE(has(p, fmt::format("  its phase:       collective on 63 ranks; compute on rank {}\n", p.truth_rank)))
      << p.transcript;
  EXPECT_TRUE(has(p, "end of run:        no run_end on every rank\n")) << p.transcript;
  // the model first, liveness never: 50 + 0 + 10 + 0 + 10 + 5
  EXPECT_EQ(play_sim("run-not-alive-hang.yaml", 4, "lr\nanswer run_not_alive\n").score.total, 75);
}

TEST(DrillSimulated, AStaleLoggerShowsOneLoggedStepRepeated) {
  Played p = play_sim("run-not-alive-stale-logging.yaml", 5, "alive\nlr\ngrad\nanswer run_not_alive\n");
  EXPECT_EQ(p.score.total, 100);
  EXPECT_TRUE(has(p, "one logged step repeated (3+ records, t advancing): step ")) << p.transcript;
  EXPECT_FALSE(has(p, "one logged step repeated (3+ records, t advancing): never")) << p.transcript;
  EXPECT_EQ(play_sim("run-not-alive-stale-logging.yaml", 5, "alive\nlr\ngrad\nanswer lr_zero\n", 200).score.total,
            0 + 15 + 10 + 10 + 10 + 3);
}

TEST(DrillSimulated, AScheduleTooShortShowsInTheLr) {
  Played p = play_sim("lr-zero-schedule-too-short.yaml", 6, "alive\nlr\ngrad\nanswer lr_zero\n");
  EXPECT_EQ(p.score.total, 100);
  EXPECT_TRUE(has(p, "below 0.1% of the peak from step ")) << p.transcript;
}

TEST(DrillSimulated, ARestartScoresTheDataAfterIt) {
  // lr_zero restored on resume: the right cause without `data` loses the restart's 10 points
  Played p = play_sim("lr-zero-finished-schedule-on-resume.yaml", 7, "alive\nlr\ngrad\nanswer lr_zero\n");
  EXPECT_TRUE(p.score.restarted);
  EXPECT_EQ(p.score.data_pts, 0);
  EXPECT_EQ(p.score.total, 100);
  EXPECT_EQ(p.score.max_total, 110);
  EXPECT_EQ(p.score.missed, (std::vector<std::string>{"data"}));
  EXPECT_TRUE(has(p, "the job was restarted: resumed from checkpoint step ")) << p.transcript;
  EXPECT_TRUE(has(p, "  data after the restart   0/10  no: the job was restarted")) << p.transcript;
  EXPECT_TRUE(has(p, "  total                  100/110\n")) << p.transcript;
  EXPECT_EQ(play_sim("lr-zero-finished-schedule-on-resume.yaml", 7, "alive\nlr\ngrad\ndata\nanswer lr_zero\n")
                .score.total,
            110);
}

TEST(DrillSimulated, TheResumedLoaderReplaysAndTheDataViewShowsIt) {
  Played p = play_sim("data-replay-resume-drops-sampler.yaml", 8, "alive\nlr\ngrad\ndata\nanswer data_replay\n");
  EXPECT_EQ(p.score.truth_cause, "data_replay");
  EXPECT_EQ(p.score.total, 110);
  EXPECT_TRUE(has(p, "  total                  110/110\n")) << p.transcript;
  EXPECT_TRUE(has(p, ": batch ")) << p.transcript;
  EXPECT_TRUE(has(p, ", first trained at step 1 (a REPEAT)\n")) << p.transcript;
  EXPECT_TRUE(has(p, "repeat batches first trained at steps 1..")) << p.transcript;
  // the right answer without opening `data`: 100 of 110, and the summary says what was skipped
  Played q = play_sim("data-replay-resume-drops-sampler.yaml", 8, "alive\nlr\ngrad\nanswer data_replay\n");
  EXPECT_EQ(q.score.total, 100);
  EXPECT_EQ(q.score.missed, (std::vector<std::string>{"data"}));
  EXPECT_TRUE(has(q, "scored on: liveness checked before the model; lr and grad norm read before the answer; the "
                     "data after the restart")) << q.transcript;
}

TEST(DrillSimulated, ACycleOfBatchesRepeatsWithoutARestart) {
  Played p = play_sim("data-replay-cycle-window.yaml", 9, "alive\nlr\ngrad\ndata\nanswer data_replay\n");
  EXPECT_FALSE(p.score.restarted);
  EXPECT_EQ(p.score.total, 100);
  EXPECT_EQ(p.score.max_total, 100);
  EXPECT_TRUE(has(p, "every tracked rank: 2000 batches hashed, ")) << p.transcript;
}

TEST(DrillSimulated, TheLossScaleCollapses) {
  Played p = play_sim("loss-scale-clamped-low.yaml", 10, "alive\nlr\ngrad\nscale\nanswer loss_scale_collapse\n");
  EXPECT_EQ(p.score.total, 100);
  EXPECT_TRUE(has(p, "loss scale: first 6.55e+04, min 1.53e-05")) << p.transcript;
  Played q = play_sim("loss-scale-overflow-streak.yaml", 11, "alive\nlr\ngrad\nanswer healthy\n");
  EXPECT_EQ(q.score.total, 0 + 15 + 10 + 10 + 10 + 5);
  EXPECT_EQ(q.score.missed, (std::vector<std::string>{"scale"}));
}

TEST(DrillSimulated, OneRankOfSixtyFourSendsZeros) {
  Played p = play_sim("zero-grad-rank-zeroed-buffer.yaml", 12, "");
  const std::string right = fmt::format("alive\nlr\ngrad\nranks\nanswer zero_grad_rank {}\n", p.truth_rank);
  p = play_sim("zero-grad-rank-zeroed-buffer.yaml", 12, right);
  EXPECT_EQ(p.score.total, 100);
  EXPECT_TRUE(has(p, fmt::format("  rank {}: median 0 (x0 of the ranks' median)", p.truth_rank))) << p.transcript;
  const int wrong = (p.truth_rank + 1) % 64;
  EXPECT_EQ(play_sim("zero-grad-rank-zeroed-buffer.yaml", 12,
                     fmt::format("alive\nlr\ngrad\nranks\nanswer zero_grad_rank {}\n", wrong))
                .score.total,
            25 + 15 + 10 + 10 + 10 + 5);
  Played s = play_sim("zero-grad-rank-skipped-backward.yaml", 13, "");
  EXPECT_EQ(play_sim("zero-grad-rank-skipped-backward.yaml", 13,
                     fmt::format("alive\nlr\ngrad\nranks\nanswer zero_grad_rank {}\n", s.truth_rank))
                .score.total,
            100);
}

TEST(DrillSimulated, HealthyLookAlikes) {
  Played r = play_sim("healthy-restart.yaml", 14, "alive\nlr\ngrad\ndata\nanswer healthy\n");
  EXPECT_EQ(r.score.total, 110);
  EXPECT_TRUE(has(r, "the same batch as its first run (a re-run)\n")) << r.transcript;
  EXPECT_FALSE(has(r, "(a REPEAT)")) << r.transcript;
  Played no_data = play_sim("healthy-restart.yaml", 14, "alive\nlr\ngrad\nanswer healthy\n");
  EXPECT_EQ(no_data.score.total, 100);
  EXPECT_EQ(no_data.score.missed, (std::vector<std::string>{"data"}));
  EXPECT_EQ(play_sim("healthy-cosine-tail.yaml", 15, "alive\nlr\ngrad\nanswer healthy\n").score.total, 100);
  Played f = play_sim("healthy-fp16.yaml", 16, "alive\nlr\ngrad\nscale\nanswer loss_scale_collapse\n", 400);
  EXPECT_EQ(f.score.total, 0 + 15 + 10 + 10 + 10 + 0);
  EXPECT_EQ(f.status, 1);
}

TEST(DrillSimulated, ExplainWalksTheChecklistAfterTheAnswer) {
  Played p = play_sim("lr-zero-schedule-too-short.yaml", 6, "alive\nanswer healthy\n", 10, true);
  EXPECT_TRUE(has(p, "=== the checklist on this run (--explain) ===\n1. `alive` -> run_not_alive")) << p.transcript;
  EXPECT_TRUE(has(p, "2. `lr` -> lr_zero: lr series, update/param ratio\n   on this run: peak lr 0.003")) << p.transcript;
  EXPECT_TRUE(has(p, "   rules it IN: the lr decayed to (near) zero")) << p.transcript;
  EXPECT_TRUE(has(p, "   the detectors: FAIL (lr = ")) << p.transcript;
  EXPECT_TRUE(has(p, "walk: the first check that rules its cause in names it: lr_zero\n"
                     "the detectors: lr_zero; the truth: lr_zero\n")) << p.transcript;
  EXPECT_LT(p.transcript.find("  total  "), p.transcript.find("=== the checklist on this run"));
  EXPECT_FALSE(has(play_sim("lr-zero-schedule-too-short.yaml", 6, "answer lr_zero\n"), "--explain"));
}

TEST(DrillPick, SeededAndCoversEveryRun) {
  EXPECT_EQ(drill_pick(4, 1), drill_pick(4, 1));
  std::set<size_t> seen;
  for (uint64_t seed = 0; seed < 32; ++seed) seen.insert(drill_pick(4, seed));
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(drill_pick(1, 12345), 0u);
  EXPECT_EQ(evidence_signal("zero_grad_rank"), "ranks");
  EXPECT_EQ(evidence_signal("healthy"), "");
}

}  // namespace
}  // namespace flatline::testing
