// Adversarial: what `--detector NAME=COMMAND` brings in, the name and the program (docs/DESIGN.md §9
// "Untrusted input", §13 "Ending a detector"). A name that could not name a file is a usage error (2);
// a program that floods stderr has the first 1 MiB kept; a program that starts children which leave
// its process group (setsid) never outlives the run, a stop of flatline (SIGTERM: within the 5 s of §8)
// or flatline itself (SIGKILL).
#include <memory>

#include "tests/e2e/adversarial/attack.h"

namespace flatline::attack {
namespace {

TEST(AdversarialDetectorNames, ANameThatCouldNotNameAFileIsAUsageError) {
  const std::string suite = fresh_suite();
  const std::string run = suite + "/a-lr-zero";
  struct Case {
    std::string spec, said;
  };
  const std::vector<Case> cases = {
      {std::string(300, 'd') + "=cat", "--detector: the name '" + std::string(40, 'd') + "...' is 300 characters; at most 64"},
      {"../up=cat", "the name must be letters, digits, '.', '_' or '-'"},
      {"..=cat", "the name must be letters, digits, '.', '_' or '-'"},
      {"a/b=cat", "the name must be letters, digits, '.', '_' or '-'"},
      {"'esc\x1b[2J=cat'", "the name must be letters, digits, '.', '_' or '-'"},
      {"=cat", "expected NAME=COMMAND"},
      {"quiet=' '", "empty command"},
  };
  for (const Case& c : cases) {
    const Ran r = flatline_within("score " + run + " --detector " + (c.spec.front() == '\'' ? c.spec : "'" + c.spec + "'"), 30);
    EXPECT_EQ(r.status, 2) << c.spec << "\n" << r.out;
    EXPECT_NE(r.out.find(c.said), std::string::npos) << c.spec << "\n" << r.out;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
  }
  fs::remove_all(suite);
}

// A marker no other process has on its command line: `sleep 600.<n>` children are found by it.
std::string marker() { return "600." + std::to_string(std::random_device{}() % 1000000 + 1000000); }

// `score` replaying a run slowly with a detector that has left two children behind, one in a session of
// its own (setsid), both named by marker `m`; returns once both are running.
std::unique_ptr<e2e::Background> score_with_escapees(const std::string& suite, const std::string& m) {
  auto score = std::make_unique<e2e::Background>(
      std::vector<std::string>{"score", suite + "/a-lr-zero", "--realtime", "--speed", "0.5", "--detector",
                               "escapee=setsid sleep " + m + " </dev/null >/dev/null 2>&1 & sleep " + m +
                                   " & exec cat >/dev/null"},
      suite + "/score.out");
  for (int i = 0; i < 100 && e2e::processes_with(m).size() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(e2e::processes_with(m).size(), 2u) << score->output();
  return score;
}

TEST(AdversarialDetectorNames, ASIGTERMEndsAReplayAndEveryDetectorDescendantWithin5s) {
  const std::string suite = fresh_suite();
  const std::string m = marker();
  auto run = score_with_escapees(suite, m);
  e2e::Background& score = *run;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  score.signal(SIGTERM);
  const int st = score.wait(10);
  EXPECT_NE(st, -1) << "still running 10 s after SIGTERM\n" << score.output();
  EXPECT_LT(score.seconds_since_start(), 60);
  EXPECT_NE(score.output().find("interrupted"), std::string::npos) << score.output();
  e2e::expect_no_process_left(m, 5);
  fs::remove_all(suite);
}

TEST(AdversarialDetectorNames, FlatlineKilledTakesEveryDetectorDescendantWithIt) {
  const std::string suite = fresh_suite();
  const std::string m = marker();
  auto run = score_with_escapees(suite, m);
  e2e::Background& score = *run;
  score.signal(SIGKILL);
  EXPECT_EQ(score.wait(5), 128 + SIGKILL);
  e2e::expect_no_process_left(m, 5);
  // what a SIGKILLed flatline cannot remove: its re-enactment directory (marked as its own)
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path()))
    if (e.path().filename().string().rfind("flatline-score-" + std::to_string(score.pid()) + "-", 0) == 0)
      fs::remove_all(e.path());
  fs::remove_all(suite);
}

// Live: a detector that writes stderr as fast as it can for the whole run, and exits leaving a
// background child: the run is scored, 1 MiB of stderr is kept with a line saying how much was not, and
// nothing of the detector is left.
TEST(AdversarialDetectorNames, AStderrFloodIsKeptTo1MiBAndABackgroundChildDoesNotOutliveTheRun) {
  const std::string d = e2e::scratch();
  const std::string m = marker();
  e2e::write(d, "flood.yaml", "name: attack-flood\n" + std::string(e2e::kTinyBase) +
                                  "steps: 40\nschedule: {kind: constant}\nexpect: {cause: healthy}\n");
  const Ran r = flatline_within("score " + d + "/flood.yaml --out " + d + "/runs --detector 'flood=yes flood-" + m +
                                    " >&2 & sleep " + m + " & exec cat >/dev/null'",
                                300);
  EXPECT_NE(r.status, 124) << r.out;
  EXPECT_NE(r.status, 3) << r.out;
  const std::string kept = d + "/runs/attack-flood/detectors/flood.stderr";
  ASSERT_TRUE(fs::exists(kept)) << r.out;
  const auto size = fs::file_size(kept);
  EXPECT_GT(size, 1u << 20);
  EXPECT_LT(size, (1u << 20) + 200);
  const std::string text = e2e::read_file(kept);
  EXPECT_NE(text.find("more bytes of stderr not kept: 1.0 MiB at most]"), std::string::npos) << text.substr(text.size() - 200);
  e2e::expect_no_process_left(m, 5);
  fs::remove_all(d);
}

}  // namespace
}  // namespace flatline::attack
