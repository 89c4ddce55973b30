// The command line under odd input, as a user (or an adversary) types it: --version and usage errors;
// the local world-size guard and fleet-only scenarios (`run` refuses, `score` skips with a line); report
// paths that cannot be written, refused before the suite runs; scenario paths that are not files; the
// worker's environment; `simulate` options that would mean nothing; the drill on a run whose manifest
// (its hidden truth) cannot be read; and `run`'s progress on a terminal and in a pipe.
#include <gtest/gtest.h>

#include <thread>
#include <pty.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>

#include "tests/e2e/helpers.h"

namespace {
using namespace flatline::e2e;

const std::string kSource = FLATLINE_SOURCE_DIR;

TEST(Cli, VersionAndUsageErrors) {
  Ran v = run("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("flatline 0.1.0", 0), 0u) << v.out;
  Ran bad = run("run --no-such-option x.yaml");
  EXPECT_EQ(bad.status, 2) << bad.out;  // a usage error, as POSIX utilities exit
  EXPECT_NE(bad.out.find("--no-such-option"), std::string::npos) << bad.out;
  EXPECT_EQ(run("no-such-command").status, 2);
  EXPECT_EQ(run("simulate").status, 2);  // a missing argument
}

TEST(Cli, TheGuardRefusesAThousandLocalRanksBeforeStartingAny) {
  const std::string d = scratch();
  // scenarios/fleet/hang.yaml without its fleet_only marker: the guard itself must stop it
  std::string text = read_file(kSource + "/scenarios/fleet/hang.yaml");
  text.erase(text.find("fleet_only: true"), std::string("fleet_only: true").size());
  Ran r = run("run " + write(d, "big.yaml", text) + " --out " + d + "/runs");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("world_size 1024 is more than this machine can run as local processes"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("local ranks (4 per core"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flatline simulate " + d + "/big.yaml --ranks 1024"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 5);
  EXPECT_FALSE(fs::exists(d + "/runs/fleet-hang")) << "nothing may start";
  Ran fleet = run("run " + kSource + "/scenarios/fleet/hang.yaml --out " + d + "/runs");
  EXPECT_EQ(fleet.status, 2) << fleet.out;
  EXPECT_NE(fleet.out.find("fleet-only scenario (fleet_only: true, world_size 1024)"), std::string::npos) << fleet.out;
}

TEST(Cli, ScoreOnADirectorySkipsFleetOnlyScenariosWithALine) {
  const std::string d = scratch();
  fs::create_directories(d + "/suite/fleet");
  fs::copy_file(kSource + "/scenarios/fleet/straggler.yaml", d + "/suite/fleet/straggler.yaml");
  write(d + "/suite", "tiny.yaml", "name: e2e-tiny\n" + std::string(kTinyBase) + "steps: 10\nexpect: {cause: healthy}\n");
  Ran r = run("score " + d + "/suite --out " + d + "/runs");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("skip " + d + "/suite/fleet/straggler.yaml: fleet-only (world_size 1024): flatline simulate"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1/1] e2e-tiny"), std::string::npos) << r.out;
  expect_no_process_left(d);
}

TEST(Cli, ScoreRefusesAReportItCannotWriteBeforeRunningAnything) {
  const std::string d = scratch();
  write(d, "tiny.yaml", "name: e2e-tiny-out\n" + std::string(kTinyBase) + "steps: 10\nexpect: {cause: healthy}\n");
  for (const std::string& opt : {"--junit", "--json"}) {
    Ran r = run("score " + d + "/tiny.yaml --out " + d + "/runs " + opt + " " + d + "/no-such-dir/x.out");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(d + "/no-such-dir/x.out: cannot write the file: directory " + d + "/no-such-dir"),
              std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(d + "/runs")) << "the suite must not have started";
    Ran dir = run("score " + d + "/tiny.yaml --out " + d + "/runs " + opt + " " + d);
    EXPECT_EQ(dir.status, 2) << dir.out;
    EXPECT_NE(dir.out.find("it is a directory"), std::string::npos) << dir.out;
  }
}

TEST(Cli, ScenarioPathsThatAreNotFilesAreSaidToBeWhatTheyAre) {
  const std::string d = scratch();
  Ran dir = run("run " + d);
  EXPECT_EQ(dir.status, 2);
  EXPECT_NE(dir.out.find(d + ": is a directory, expected a scenario YAML file"), std::string::npos) << dir.out;
  Ran dev = run("run /dev/urandom");
  EXPECT_EQ(dev.status, 2);
  EXPECT_NE(dev.out.find("/dev/urandom: not a regular file"), std::string::npos) << dev.out;
  EXPECT_LT(dev.seconds, 5);  // not read until memory runs out
  std::ofstream(d + "/huge.yaml") << std::string(2 << 20, '#');
  Ran huge = run("run " + d + "/huge.yaml");
  EXPECT_EQ(huge.status, 2);
  EXPECT_NE(huge.out.find("more than a scenario's 1024 KiB"), std::string::npos) << huge.out;
  Ran data = run("run " + write(d, "zero.yaml", "name: z\ndata: {kind: text, path: /dev/zero}\nexpect: {cause: healthy}\n"));
  EXPECT_EQ(data.status, 2);
  EXPECT_NE(data.out.find("/dev/zero is not a regular file or a directory"), std::string::npos) << data.out;
}

TEST(Cli, TheWorkersEnvironmentIsValidated) {
  const std::string d = scratch();
  const std::string s = write(d, "s.yaml", "name: e2e-env\n" + std::string(kTinyBase) + "steps: 5\nexpect: {cause: healthy}\n");
  struct Case {
    std::string env, message;
  } cases[] = {
      {"RANK=abc WORLD_SIZE=2", "RANK='abc': expected an integer in [0, 1]"},
      {"RANK=2 WORLD_SIZE=2", "RANK='2': expected an integer in [0, 1]"},  // not 30 s waiting for the store
      {"RANK=0 WORLD_SIZE=0", "WORLD_SIZE='0': expected an integer in [1, "},
      {"WORLD_SIZE=2", "WORLD_SIZE=2 but RANK (or SLURM_PROCID) is not set"},
      {"RANK=0 WORLD_SIZE=2 MASTER_PORT=70000", "MASTER_PORT='70000': expected an integer in [1, 65535]"},
      {"RANK=0 WORLD_SIZE=1 FLATLINE_RUN_T0=yesterday", "FLATLINE_RUN_T0='yesterday': expected the run's start in epoch seconds"},
      // a start ahead of now would make every record's t negative, running backwards
      {"RANK=0 WORLD_SIZE=1 FLATLINE_RUN_T0=1e30", "FLATLINE_RUN_T0='1e30': expected the run's start in epoch seconds"},
      {"RANK=0 WORLD_SIZE=1 FLATLINE_RUN_T0=12", "FLATLINE_RUN_T0='12': expected the run's start in epoch seconds"},
      // more intra-op threads than this machine has only thrash
      {"RANK=0 WORLD_SIZE=1 FLATLINE_THREADS=4096",
       "FLATLINE_THREADS='4096': expected an integer in [1, " + std::to_string(std::max(1u, std::thread::hardware_concurrency())) + "]"},
      {"RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=3", "LOCAL_WORLD_SIZE='3': expected an integer in [1, 2]"},
  };
  for (const auto& c : cases) {
    Ran r = run("worker " + s + " --run-dir " + d + "/run", "env -u RANK -u WORLD_SIZE " + c.env);
    EXPECT_EQ(r.status, 2) << c.env << ": " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.env << ": " << r.out;
    EXPECT_LT(r.seconds, 10) << c.env;
  }
}

TEST(Cli, SimulateRefusesOptionsThatWouldMeanNothing) {
  const std::string hang = kSource + "/scenarios/fleet/hang.yaml";
  for (const std::string& ms : {"-5", "0", "1e308", "nan"}) {
    Ran r = run("simulate " + hang + " --ranks 4 --steps 10 --step-ms " + ms);
    EXPECT_EQ(r.status, 2) << ms << ": " << r.out;
    EXPECT_NE(r.out.find("--step-ms"), std::string::npos) << ms << ": " << r.out;
  }
  // the hang is at step 600: a run of 500 steps would silently miss it
  std::string text = read_file(hang);
  text.replace(text.find("rank: 517"), 9, "rank: 3");
  const std::string d = scratch();
  Ran early = run("simulate " + write(d, "hang.yaml", text) + " --ranks 4 --steps 500");
  EXPECT_EQ(early.status, 2) << early.out;
  EXPECT_NE(early.out.find("the fault starts at step 600, after the simulated run's last step 500"),
            std::string::npos) << early.out;
}

TEST(Cli, TheDrillRefusesARunWhoseManifestCannotBeRead) {
  const std::string d = scratch();
  Ran sim = run("simulate " + kSource + "/scenarios/fleet/healthy.yaml --ranks 2 --steps 60 --out " + d);
  ASSERT_EQ(sim.status, 0) << sim.out;
  const std::string run_dir = d + "/fleet-healthy";
  for (const std::string& manifest : {std::string(), std::string("{\"scenario\": ")}) {
    std::ofstream(run_dir + "/manifest.json") << manifest;  // empty, then cut short
    Ran r = run("drill --from " + run_dir + " --seed 1 --answers /dev/null");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(run_dir + "/manifest.json holds the run's hidden truth, and "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("ground truth"), std::string::npos) << "no drill against a made-up truth: " << r.out;
  }
}

TEST(Cli, RunShowsProgressInPlaceOnATerminalAndPlainLinesInAPipe) {
  const std::string d = scratch();
  const std::string s = write(d, "s.yaml", "name: e2e-progress\n" + std::string(kTinyBase) +
                                               "steps: 300\nschedule: {kind: constant}\nexpect: {cause: healthy}\n");
  Ran piped = run("run " + s + " --out " + d + "/runs");
  ASSERT_EQ(piped.status, 0) << piped.out;
  EXPECT_NE(piped.out.find("\n  step 30/300  loss "), std::string::npos) << piped.out;
  EXPECT_NE(piped.out.find("\n  step 300/300  loss "), std::string::npos) << piped.out;
  EXPECT_EQ(piped.out.find('\r'), std::string::npos);
  // a terminal: the same command under a pseudo-terminal
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(FLATLINE_BIN, FLATLINE_BIN, "run", s.c_str(), "--out", (d + "/tty-runs").c_str(), nullptr);
    _exit(127);
  }
  std::string tty;
  char buf[4096];
  for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) tty.append(buf, static_cast<size_t>(n));
  int st = 0;
  waitpid(pid, &st, 0);
  close(master);
  EXPECT_EQ(WEXITSTATUS(st), 0) << tty;
  EXPECT_NE(tty.find("\r\x1b[K  step "), std::string::npos) << tty;
  EXPECT_NE(tty.find("steps/s  ETA "), std::string::npos) << tty;
  EXPECT_NE(tty.find("step 300/300"), std::string::npos) << tty;
  expect_no_process_left(d);
}

}  // namespace

namespace {
// The check every e2e test ends with (tests/e2e/no_process_left.h) finds what a test leaves behind
// however it detached: a double-forked grandchild in a session of its own, reparented away from the test.
TEST(NoProcessLeft, FindsADetachedGrandchildByTheTestsTag) {
  const char* tag = std::getenv(flatline::e2e::kTestTagVar);
  ASSERT_TRUE(tag && *tag) << "the listener sets it for every test";
  const std::string entry = std::string(flatline::e2e::kTestTagVar) + "=" + tag;
  ASSERT_EQ(std::system("setsid sh -c 'sleep 31.4159 </dev/null >/dev/null 2>&1 &' </dev/null"), 0);
  std::vector<int> found;
  for (int i = 0; i < 50 && found.empty(); ++i) {
    found = flatline::e2e::processes_with_env(entry);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(flatline::e2e::command_of(found[0]).find("sleep 31.4159"), std::string::npos);
  for (int pid : found) kill(pid, SIGKILL);  // found: not left for the listener to report
}
}  // namespace
