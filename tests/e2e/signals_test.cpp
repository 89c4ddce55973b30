// The harness under signals and stalls (docs/DESIGN.md §8): SIGTERM / SIGINT to `flatline run` are
// forwarded to every rank, which flushes and leaves an `interrupted` event; the run says "interrupted"
// and exits 128 + the signal; ranks that do not exit are killed after the grace, or at once on a second
// signal; the launcher's own SIGKILL ends every rank; a run from which no record arrives (every rank
// SIGSTOPped) is diagnosed run_not_alive live, stopped, and ends in bounded time. Each test checks
// that no process is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "core/protocol.h"
#include "cli/replay.h"
#include "telemetry/manifest.h"
#include "tests/e2e/helpers.h"

namespace {
using namespace flatline::e2e;
using flatline::read_manifest;

const std::string kLong = std::string(kTinyBase) + R"(steps: 100000
schedule: {kind: constant}
collective_timeout_s: 5
expect: {cause: healthy}
)";

struct Started {
  std::string dir, run_dir;
};

Started start_long(const std::string& name) {
  Started s{scratch(), ""};
  write(s.dir, "s.yaml", "name: " + name + "\n" + kLong);
  s.run_dir = s.dir + "/runs/" + name;
  return s;
}

void expect_interrupted_run(const std::string& run_dir, int64_t steps_before, const std::string& signal) {
  auto m = read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "interrupted");
  EXPECT_NE(m.error.find("interrupted by " + signal), std::string::npos) << m.error;
  for (int rank = 0; rank < 2; ++rank) {
    const flatline::Record last = last_record(run_dir, rank);
    EXPECT_EQ(last.kind, flatline::RecordKind::event);
    EXPECT_EQ(last.name, "interrupted") << "rank " << rank;
    EXPECT_NE(last.detail.find(signal + " from the launcher"), std::string::npos) << last.detail;
  }
  EXPECT_GE(steps_on_disk(run_dir + "/telemetry/rank-0.jsonl"), steps_before);  // flushed, kept
}

TEST(Signals, SigtermIsForwardedTheRanksFlushAndTheRunSaysInterrupted) {
  const Started s = start_long("e2e-sigterm");
  Background run({"run", s.dir + "/s.yaml", "--out", s.dir + "/runs"}, s.dir + "/out.txt");
  ASSERT_TRUE(wait_for_steps(s.run_dir, 0, 20)) << run.output();
  const int64_t before = steps_on_disk(s.run_dir + "/telemetry/rank-0.jsonl");
  const auto sent = std::chrono::steady_clock::now();
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait(30), 143) << run.output();  // 128 + SIGTERM, as a shell reports it
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_LT(took, flatline::kInterruptGraceS) << "the ranks should exit on the forwarded signal, not be killed";
  EXPECT_NE(run.output().find("verdict: INTERRUPTED"), std::string::npos) << run.output();
  expect_interrupted_run(s.run_dir, before, "SIGTERM");
  expect_no_process_left(s.run_dir);
}

TEST(Signals, CtrlCExits130) {
  const Started s = start_long("e2e-sigint");
  Background run({"run", s.dir + "/s.yaml", "--out", s.dir + "/runs"}, s.dir + "/out.txt");
  ASSERT_TRUE(wait_for_steps(s.run_dir, 0, 20)) << run.output();
  const int64_t before = steps_on_disk(s.run_dir + "/telemetry/rank-0.jsonl");
  run.signal(SIGINT);
  EXPECT_EQ(run.wait(30), 130) << run.output();
  expect_interrupted_run(s.run_dir, before, "SIGINT");
  expect_no_process_left(s.run_dir);
}

// Ranks that ignore the forwarded signal (here a --rank-wrapper that ignores it and never starts the
// worker): killed after the grace with one signal, at once with a second.
TEST(Signals, RanksThatIgnoreItAreKilledAfterTheGraceOrAtOnceOnASecondSignal) {
  for (bool twice : {false, true}) {
    const Started s = start_long(twice ? "e2e-deaf-twice" : "e2e-deaf-once");
    const std::string deaf = write(s.dir, "deaf.sh", "#!/bin/sh\ntrap '' INT TERM HUP\nwhile :; do sleep 0.2; done\n");
    chmod(deaf.c_str(), 0755);
    Background run({"run", s.dir + "/s.yaml", "--out", s.dir + "/runs", "--rank-wrapper", deaf}, s.dir + "/out.txt");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const std::string ranks = deaf + std::string(1, '\0') + FLATLINE_BIN;  // "sh deaf.sh flatline worker ..."
    ASSERT_EQ(processes_with(ranks).size(), 2u) << run.output();
    const auto sent = std::chrono::steady_clock::now();
    run.signal(SIGINT);
    if (twice) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      run.signal(SIGINT);
    }
    EXPECT_EQ(run.wait(30), 130) << run.output();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    if (twice) {
      EXPECT_LT(took, 2.0) << run.output();
    } else {
      EXPECT_GT(took, flatline::kInterruptGraceS - 0.2) << run.output();
      EXPECT_LT(took, flatline::kInterruptGraceS + 3) << run.output();
    }
    const flatline::Record last = last_record(s.run_dir, 0);  // written by the launcher: the rank could not
    EXPECT_EQ(last.name, "stopped");
    EXPECT_NE(last.detail.find(twice ? "again: killed at once" : "did not exit within 5 s: killed"), std::string::npos)
        << last.detail;
    expect_no_process_left(deaf);
  }
}

// The launcher killed outright (SIGKILL, the OOM killer): its ranks get the parent-death signal and
// leave as for a forwarded SIGTERM, well within the collective timeout.
TEST(Signals, RanksLeaveWhenTheLauncherIsKilled) {
  const Started s = start_long("e2e-orphans");
  Background run({"run", s.dir + "/s.yaml", "--out", s.dir + "/runs"}, s.dir + "/out.txt");
  ASSERT_TRUE(wait_for_steps(s.run_dir, 0, 20)) << run.output();
  run.signal(SIGKILL);
  EXPECT_EQ(run.wait(10), 137);
  expect_no_process_left(s.run_dir, 5.0);  // the collective timeout is 5 s: they left on the signal
  for (int rank = 0; rank < 2; ++rank) {
    const flatline::Record last = last_record(s.run_dir, rank);
    EXPECT_EQ(last.name, "interrupted");
    EXPECT_NE(last.detail.find("the launcher (pid " + std::to_string(run.pid()) + ") died"), std::string::npos)
        << last.detail;
  }
}

// Every rank stopped (a paused host): heartbeats stop too. The launcher names it live from its own
// clock, stops the ranks after the stall bound, and the recorded run diagnoses the same.
TEST(Signals, AStalledRunIsDiagnosedLiveAndEndedByTheWatchdog) {
  const Started s = start_long("e2e-stall");
  Background run({"run", s.dir + "/s.yaml", "--out", s.dir + "/runs"}, s.dir + "/out.txt");
  // enough heartbeats that the detector knows their interval (0.2 s; 0.5 s assumed until it does)
  ASSERT_TRUE(wait_for_records(s.run_dir, 0, flatline::RecordKind::heartbeat, 8)) << run.output();
  ASSERT_TRUE(wait_for_records(s.run_dir, 1, flatline::RecordKind::heartbeat, 8)) << run.output();
  const int w0 = find_worker(s.run_dir, 0), w1 = find_worker(s.run_dir, 1);
  ASSERT_GT(w0, 0);
  ASSERT_GT(w1, 0);
  kill(w0, SIGSTOP);
  kill(w1, SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const int status = run.wait(60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const std::string out = run.output();
  EXPECT_EQ(status, 1) << out;
  // bound: max(10 heartbeats of 0.2 s, the 5 s collective timeout, 5 s), then the kill and the reaping
  const double bound = flatline::stall_bound_s(0.2, 5);
  EXPECT_GT(took, bound - 0.5) << out;
  EXPECT_LT(took, bound + 4) << out;
  const size_t live = out.find("[live]"), watchdog = out.find("[watchdog] no record from any rank");
  ASSERT_NE(live, std::string::npos) << out;
  ASSERT_NE(watchdog, std::string::npos) << out;
  EXPECT_LT(live, watchdog) << "the diagnosis comes before the stop";
  EXPECT_NE(out.find("run_not_alive", live), std::string::npos) << out;
  EXPECT_NE(out.find("no rank has written a record since"), std::string::npos) << out;
  auto m = read_manifest(s.run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "failed");
  EXPECT_NE(m.error.find("no record from any rank for"), std::string::npos) << m.error;
  // `flatline diagnose` of the directory afterwards: liveness against the time the run ended
  Ran d = flatline::e2e::run("diagnose " + s.run_dir);
  EXPECT_NE(d.out.find("diagnosis: run_not_alive"), std::string::npos) << d.out;
  expect_no_process_left(s.run_dir);
}

// A FIFO as the data path would block every rank in data loading forever: refused at load.
TEST(Signals, AFifoAsDataIsRefusedBeforeAnyRankStarts) {
  const std::string d = scratch();
  const std::string fifo = d + "/data.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const std::string text = "name: e2e-fifo\nmodel: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}\n"
                           "data: {kind: text, path: " + fifo + "}\nworld_size: 2\nsteps: 5\nexpect: {cause: healthy}\n";
  Ran r = flatline::e2e::run("run " + write(d, "s.yaml", text) + " --out " + d + "/runs");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(fifo + " is not a regular file or a directory"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 10);
}

}  // namespace
