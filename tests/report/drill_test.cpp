// The drill driven by scripted answers on fixture runs: exact scores for the right and wrong habits
// (liveness first, lr and grad read, signals used, time), the missed evidence, the transcript.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

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
