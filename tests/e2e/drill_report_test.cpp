// End to end: `flatline drill` in a real terminal (a detached tmux session: the plot, the prompt, the
// typed commands, the summary) on a recorded fixture run and, out of the box, on a simulated 1024-rank
// run with a restart after which the loader replays data; scripted through a pipe and --answers; the
// fleet_only drill scenarios refused by run and score; and `flatline report` on a suite directory. No
// training here: recorded runs are the synthetic fixture runs of tests/report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "report/drill.h"
#include "report/drill_run.h"
#include "tests/report/fixtures.h"

namespace flatline::testing {
namespace {

std::string sh(const std::string& cmd, int* status = nullptr) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  if (status) *status = WEXITSTATUS(st);
  return out;
}

// The fixture suite's runs in the order the drill sees them, with the right answer for each.
const char* kAnswers[] = {"answer lr_zero", "answer zero_grad_rank 1", "answer data_replay", "answer healthy"};

class DrillReportE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { suite_ = new std::string(write_fixture_suite(scratch_dir("e2e-drill"))); }
  static void TearDownTestSuite() { std::filesystem::remove_all(*suite_); }
  static std::string* suite_;
};
std::string* DrillReportE2E::suite_ = nullptr;

// A detached tmux session running one command, with its screen (scroll-back included) read back.
class Tmux {
 public:
  Tmux(const std::string& cmd, int* status)
      : sock_("flatline-e2e-" + std::to_string(getpid()) + "-" + std::to_string(++n_)), tmux_("tmux -L " + sock_ + " ") {
    sh(tmux_ + "new-session -d -s drill -x 132 -y 50 \"" + cmd + "; echo drill-exit=\\$?; sleep 600\"", status);
    sh(tmux_ + "set-option -t drill history-limit 20000");
  }
  ~Tmux() { sh(tmux_ + "kill-server"); }
  std::string screen() const { return sh(tmux_ + "capture-pane -p -J -S -20000 -t drill"); }
  void type(const std::string& keys) const { sh(tmux_ + "send-keys -t drill '" + keys + "' Enter"); }
  std::string wait_for(const std::string& what, double seconds = 10) const {
    for (int i = 0; i < seconds * 10; ++i) {
      const std::string s = screen();
      if (s.find(what) != std::string::npos) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "(timed out waiting for '" + what + "')\n" + screen();
  }

 private:
  static inline int n_ = 0;
  std::string sock_, tmux_;
};

TEST_F(DrillReportE2E, DrillInARealTerminalThroughTmux) {
  if (sh("command -v tmux").empty()) GTEST_SKIP() << "tmux not installed";
  const uint64_t seed = 7;
  const size_t pick = drill_pick(4, seed);
  int st = -1;
  Tmux t(std::string(FLATLINE_BIN) + " drill --seed " + std::to_string(seed) + " --from " + *suite_, &st);
  ASSERT_EQ(st, 0);
  std::string s = t.wait_for("drill> ");
  EXPECT_NE(s.find("training loss"), std::string::npos) << s;
  EXPECT_NE(s.find(" |*"), std::string::npos) << s;  // the plot's first point against its y axis
  for (const std::string cmd : {"alive", "lr", "grad"}) {
    t.type(cmd);
    s = t.wait_for("drill> " + cmd);
  }
  s = t.wait_for("peak lr");
  t.type(kAnswers[pick]);
  s = t.wait_for("drill-exit=");
  EXPECT_NE(s.find("the run: recorded, run " + std::to_string(pick + 1) + " of 4 under "), std::string::npos) << s;
  EXPECT_NE(s.find("logged step vs wall time"), std::string::npos) << s;
  EXPECT_NE(s.find("=== drill summary ==="), std::string::npos) << s;
  EXPECT_NE(s.find("signals you read: alive, lr, grad (3)"), std::string::npos) << s;
  EXPECT_NE(s.find("total                  100/100"), std::string::npos) << s;
  EXPECT_NE(s.find("drill-exit=0"), std::string::npos) << s;
}

// The seed that draws the resume-replay scenario out of the box (the binary embeds scenarios/drill).
uint64_t seed_drawing(const std::string& file) {
  std::vector<ScenarioText> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/drill")) {
    std::ifstream in(e.path());
    files.push_back({e.path().string(), std::string(std::istreambuf_iterator<char>(in), {})});
  }
  std::sort(files.begin(), files.end());
  for (uint64_t seed = 0; seed < 1000; ++seed)
    if (plan_drill(files, seed, {1024, 20000}).source.find(file) != std::string::npos) return seed;
  ADD_FAILURE() << "no seed draws " << file;
  return 0;
}

TEST_F(DrillReportE2E, OutOfTheBoxOnA1024RankRunWithARestartThatReplaysData) {
  if (sh("command -v tmux").empty()) GTEST_SKIP() << "tmux not installed";
  const uint64_t seed = seed_drawing("data-replay-resume-drops-sampler.yaml");
  int st = -1;
  Tmux t(std::string(FLATLINE_BIN) + " drill --ranks 1024 --steps 20000 --seed " + std::to_string(seed), &st);
  ASSERT_EQ(st, 0);
  std::string s = t.wait_for("drill> ", 120);
  EXPECT_NE(s.find("the run: simulated by the fleet simulator (no training), 1024 ranks x 20000 steps, drawn by seed " +
                   std::to_string(seed) + " from "),
            std::string::npos) << s;
  EXPECT_NE(s.find("flatline drill: \"Training loss went flat at step 1"), std::string::npos) << s;  // 12k..16k
  EXPECT_NE(s.find("the job was restarted: resumed from checkpoint step "), std::string::npos) << s;
  t.type("alive");
  s = t.wait_for("end of run:        run_end on every rank");
  EXPECT_NE(s.find("1024 of 1024 ranks wrote telemetry"), std::string::npos) << s;
  EXPECT_EQ(s.find("\n1023 "), std::string::npos) << s;  // no row per rank
  t.type("lr");
  t.type("grad");
  s = t.wait_for("fraction of zero gradient elements");
  t.type("data");
  s = t.wait_for("(a REPEAT)");
  EXPECT_NE(s.find("of 1024 ranks, spread evenly: 0, 68, 136,"), std::string::npos) << s;
  EXPECT_NE(s.find(", first trained at step 1 (a REPEAT)"), std::string::npos) << s;
  t.type("answer data_replay");
  s = t.wait_for("drill-exit=", 300);  // the summary waits for the detectors' own pass over the run
  EXPECT_NE(s.find("the run:     drill-data-replay-resume-drops-sampler (scenarios/drill/data-replay-resume-drops-"
                   "sampler.yaml)"),
            std::string::npos) << s;
  EXPECT_NE(s.find("  data after the restart  10/10  yes"), std::string::npos) << s;
  EXPECT_NE(s.find("total                  110/110"), std::string::npos) << s;
  EXPECT_NE(s.find("drill-exit=0"), std::string::npos) << s;
}

TEST_F(DrillReportE2E, ScriptedDrillFromAPipeAndFromAnswersFile) {
  const size_t pick = drill_pick(4, 2);
  int st = -1;
  std::string out = sh("printf 'alive\\nlr\\ngrad\\n" + std::string(kAnswers[pick]) + "\\n' | " + FLATLINE_BIN +
                           " drill --seed 2 --from " + *suite_, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("drill> alive\n"), std::string::npos) << out;  // commands echoed when not a terminal
  EXPECT_NE(out.find("total                  100/100"), std::string::npos) << out;
  const std::string answers = *suite_ + "/answers.txt";
  std::ofstream(answers) << "lr\nanswer run_not_alive\n";
  out = sh(std::string(FLATLINE_BIN) + " drill --seed 2 --from " + *suite_ + " --answers " + answers, &st);
  EXPECT_EQ(st, 1) << out;
  EXPECT_NE(out.find("  total                   25/100"), std::string::npos) << out;  // lr 10 + signals 10 + time 5
  out = sh(std::string(FLATLINE_BIN) + " drill --from " + *suite_ + "/no-such-dir", &st);
  EXPECT_EQ(st, 2);
  EXPECT_NE(out.find("flatline score --out runs"), std::string::npos) << out;
  out = sh(std::string(FLATLINE_BIN) + " drill --from " + *suite_ + " --ranks 64", &st);
  EXPECT_EQ(st, 2);
  EXPECT_NE(out.find("--ranks and --steps shape a simulated run"), std::string::npos) << out;
}

TEST_F(DrillReportE2E, ASimulatedDrillFromAPipeSaysWhereItsRunCameFrom) {
  int st = -1;
  const std::string out = sh("printf 'alive\\nquit\\n' | " + std::string(FLATLINE_BIN) +
                             " drill --seed 3 --ranks 64 --steps 2000 --explain", &st);
  EXPECT_EQ(st, 1) << out;
  EXPECT_NE(out.find("\nthe run: simulated by the fleet simulator (no training), 64 ranks x 2000 steps, drawn by seed 3 "
                     "from 13 drill scenarios of 6 causes and look-alikes (replay this drill with --seed 3)\n"),
            std::string::npos) << out;
  EXPECT_NE(out.find("score: 0/"), std::string::npos) << out;
  EXPECT_NE(out.find("=== the checklist on this run (--explain) ==="), std::string::npos) << out;
  const std::string one = sh(std::string(FLATLINE_BIN) + " drill --ranks 1", &st);
  EXPECT_NE(st, 0) << one;
  EXPECT_NE(one.find("--ranks"), std::string::npos) << one;
}

TEST_F(DrillReportE2E, TheDrillScenariosAreForTheSimulatorOnly) {
  const std::string dir = std::string(FLATLINE_SOURCE_DIR) + "/scenarios/drill";
  int st = -1;
  std::string out = sh(std::string(FLATLINE_BIN) + " score " + dir + " --out " + *suite_ + "/score-out", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("skip " + dir + "/healthy-restart.yaml: fleet-only (world_size 1024): flatline simulate"),
            std::string::npos) << out;
  EXPECT_NE(out.find("scenario(s) found are fleet-only (flatline simulate)"), std::string::npos) << out;
  out = sh(std::string(FLATLINE_BIN) + " run " + dir + "/healthy-restart.yaml --out " + *suite_ + "/run-out", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("healthy-restart.yaml: fleet-only scenario (fleet_only: true, world_size 1024)"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(*suite_ + "/run-out"));
}

TEST_F(DrillReportE2E, ReportOnASuiteDirectory) {
  if (sh("command -v gnuplot").empty()) GTEST_SKIP() << "gnuplot not installed";
  int st = -1;
  const std::string out = sh(std::string(FLATLINE_BIN) + " report " + *suite_, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_EQ(out, "wrote " + *suite_ + "/report.html (4 run(s), 24 plots)\n");
  std::ifstream f(*suite_ + "/report.html");
  const std::string page((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t svgs = 0;
  for (size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) ++svgs;
  EXPECT_EQ(svgs, 24u);
  EXPECT_NE(page.find("<h2>confusion matrix</h2>"), std::string::npos);
  sh(std::string(FLATLINE_BIN) + " report " + *suite_ + "/nothing-here", &st);
  EXPECT_EQ(st, 2);
}

}  // namespace
}  // namespace flatline::testing
