// End to end: `flatline drill` in a real terminal (a detached tmux session: the plot, the prompt, the
// typed commands, the summary), scripted through a pipe and --answers, and `flatline report` on a
// suite directory. Runs are the synthetic fixture runs of tests/report (no training here).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "report/drill.h"
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

TEST_F(DrillReportE2E, DrillInARealTerminalThroughTmux) {
  if (sh("command -v tmux").empty()) GTEST_SKIP() << "tmux not installed";
  const uint64_t seed = 7;
  const size_t pick = drill_pick(4, seed);
  const std::string sock = "flatline-e2e-" + std::to_string(getpid());
  const std::string tmux = "tmux -L " + sock + " ";
  int st = -1;
  sh(tmux + "new-session -d -s drill -x 132 -y 50 \"" + std::string(FLATLINE_BIN) + " drill --seed " +
         std::to_string(seed) + " --from " + *suite_ + "; echo drill-exit=\\$?; sleep 60\"",
     &st);
  ASSERT_EQ(st, 0);
  auto screen = [&] { return sh(tmux + "capture-pane -p -J -S -400 -t drill"); };
  auto wait_for = [&](const std::string& what) {
    for (int i = 0; i < 100; ++i) {
      const std::string s = screen();
      if (s.find(what) != std::string::npos) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "(timed out waiting for '" + what + "')\n" + screen();
  };
  std::string s = wait_for("drill> ");
  EXPECT_NE(s.find("training loss"), std::string::npos) << s;
  EXPECT_NE(s.find(" |*"), std::string::npos) << s;  // the plot's first point against its y axis
  for (const std::string cmd : {"alive", "lr", "grad"}) {
    sh(tmux + "send-keys -t drill '" + cmd + "' Enter");
    s = wait_for("drill> " + cmd);
  }
  s = wait_for("peak lr");
  sh(tmux + "send-keys -t drill '" + std::string(kAnswers[pick]) + "' Enter");
  s = wait_for("drill-exit=");
  sh(tmux + "kill-server");
  EXPECT_NE(s.find("logged step vs wall time"), std::string::npos) << s;
  EXPECT_NE(s.find("=== drill summary ==="), std::string::npos) << s;
  EXPECT_NE(s.find("signals you read: alive, lr, grad (3)"), std::string::npos) << s;
  EXPECT_NE(s.find("total                  100/100"), std::string::npos) << s;
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
