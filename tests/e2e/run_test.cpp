// End to end: `flatline run` on short 2-rank scenarios, as a user runs it; the diagnosis and the run
// directory are checked. Also: a hung rank ends the run with a clear error in bounded time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "telemetry/jsonl.h"
#include "telemetry/manifest.h"
#include "tests/e2e/helpers.h"

namespace {
namespace fs = std::filesystem;
using namespace flatline::e2e;

const char* kBase = kTinyBase;

TEST(EndToEnd, RunNamesLrZeroWithEvidenceAndWritesTheRunDirectory) {
  const std::string d = scratch();
  const std::string yaml = std::string("name: e2e-lr-zero\n") + kBase + R"(steps: 60
schedule: {kind: cosine, warmup: 5, total: 60, min_lr: 3.0e-4}
faults:
  - {kind: lr_zero, at: 40, target: {rank: all}, params: {mode: schedule_total_too_short}}
expect: {cause: lr_zero, within_steps: 3}
)";
  Ran r = run("run " + write(d, "s.yaml", yaml) + " --out " + d + "/runs");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("lr_zero"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict: correct"), std::string::npos) << r.out;
  const std::string run_dir = d + "/runs/e2e-lr-zero";
  auto m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "completed");
  ASSERT_EQ(m.faults.size(), 1u);
  EXPECT_EQ(m.faults[0].onset_step, 40);
  auto diag = nlohmann::json::parse(std::ifstream(run_dir + "/diagnosis.json"));
  EXPECT_EQ(diag["cause"], "lr_zero");
  EXPECT_GE(diag["detected_step"].get<int>(), m.faults[0].active_from);
  EXPECT_LE(diag["detected_step"].get<int>(), 43);
  for (int rank = 0; rank < 2; ++rank) {
    auto recs = flatline::read_jsonl(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr);
    int steps = 0, heartbeats = 0;
    for (const auto& rec : recs) {
      steps += rec.kind == flatline::RecordKind::step;
      heartbeats += rec.kind == flatline::RecordKind::heartbeat;
      if (rec.kind == flatline::RecordKind::step && rec.step >= 40) {
        EXPECT_EQ(*rec.lr, 0.0);
      }
    }
    EXPECT_EQ(steps, 60);
    EXPECT_GT(heartbeats, 0);
  }
}

TEST(EndToEnd, HealthyTwinStaysSilent) {
  const std::string d = scratch();
  const std::string yaml = std::string("name: e2e-healthy\n") + kBase + R"(steps: 60
schedule: {kind: cosine, warmup: 5, total: 60, min_lr: 3.0e-4}
checkpoint: {every: 20}
eval: {every: 20, batches: 2}
expect: {cause: healthy}
)";
  Ran r = run("run " + write(d, "s.yaml", yaml) + " --out " + d + "/runs");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("verdict: correct"), std::string::npos) << r.out;
  auto diag = nlohmann::json::parse(std::ifstream(d + "/runs/e2e-healthy/diagnosis.json"));
  EXPECT_EQ(diag["cause"], "healthy");
}

// gloo's timeout test, at process level: rank 1 blocks before the all-reduce; rank 0 must fail with a
// clear error once the collective timeout (3 s) passes, the launcher must end the run in bounded time,
// and every step completed before the hang must be on disk.
TEST(EndToEnd, HungRankEndsTheRunWithAClearErrorInBoundedTime) {
  const std::string d = scratch();
  const std::string yaml = std::string("name: e2e-hang\n") + kBase + R"(steps: 200
collective_timeout_s: 3
schedule: {kind: constant}
faults:
  - {kind: run_not_alive, at: 20, target: {rank: 1}, params: {mode: hang, timeout_s: 6}}
expect: {cause: run_not_alive, within_steps: 2}
)";
  Ran r = run("run " + write(d, "s.yaml", yaml) + " --out " + d + "/runs");
  EXPECT_LT(r.seconds, 60) << r.out;
  EXPECT_NE(r.out.find("run_not_alive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run ended with an error"), std::string::npos) << r.out;
  const std::string run_dir = d + "/runs/e2e-hang";
  auto m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "failed");
  auto recs = flatline::read_jsonl(run_dir + "/telemetry/rank-0.jsonl", nullptr);
  int64_t last_step = 0;
  bool error_event = false;
  for (const auto& rec : recs) {
    if (rec.kind == flatline::RecordKind::step) last_step = std::max(last_step, rec.step);
    if (rec.kind == flatline::RecordKind::event && rec.name == "error") {
      error_event = true;
      EXPECT_NE(rec.detail.find("all-reduce"), std::string::npos) << rec.detail;
    }
  }
  EXPECT_EQ(last_step, 19);
  EXPECT_TRUE(error_event);
}

// Every rank blocked reading its data, heartbeats going on (a stalled file system): no collective times
// out, so only the launcher's progress watchdog (core/protocol.h progress_bound_s) can end it. It does,
// at its bound (here stall_bound_s's 5 s floor: ten 30 ms steps and the 3 s collective timeout are less),
// after run_not_alive named it; the run met its expectation (exit 0: the failure is the fault's);
// every completed step is on disk, each rank's stream ends with the launcher's `stopped`, no process left.
TEST(EndToEnd, EveryRankStalledReadingDataWhileBeatingIsEndedByTheProgressWatchdog) {
  const std::string d = scratch();
  const std::string yaml = std::string("name: e2e-data-stall\n") + kBase + R"(steps: 100000
collective_timeout_s: 3
schedule: {kind: constant}
faults:
  - {kind: run_not_alive, at: 20, target: {rank: all}, params: {mode: data_stall}}
expect: {cause: run_not_alive, within_steps: 2}
)";
  const std::string run_dir = d + "/runs/e2e-data-stall";
  Ran r = run("run " + write(d, "s.yaml", yaml) + " --out " + d + "/runs");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_LT(r.seconds, 60) << r.out;
  EXPECT_NE(r.out.find("[watchdog] no step from any rank for"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bound 5 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("diagnosis: run_not_alive"), std::string::npos) << r.out;
  const auto m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "failed");
  EXPECT_NE(m.error.find("no step from any rank"), std::string::npos) << m.error;
  for (int rank = 0; rank < 2; ++rank) {
    const auto recs = flatline::read_jsonl(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr);
    int64_t last_step = 0, data_beats = 0;
    double last_step_t = 0, stopped_t = 0;
    for (const auto& rec : recs) {
      if (rec.kind == flatline::RecordKind::step) last_step = std::max(last_step, rec.step), last_step_t = rec.t;
      if (rec.kind == flatline::RecordKind::heartbeat && rec.phase == "data" && rec.step == 20) ++data_beats;
      if (rec.kind == flatline::RecordKind::event && rec.name == "stopped") stopped_t = rec.t;
    }
    EXPECT_EQ(last_step, 19) << rank;
    EXPECT_GT(data_beats, 5) << rank;  // beating all along, in phase "data"
    ASSERT_GT(stopped_t, 0) << rank;
    EXPECT_EQ(recs.back().name, "stopped") << rank;
    EXPECT_GT(stopped_t - last_step_t, 5.0) << rank;        // not before the bound...
    EXPECT_LT(stopped_t - last_step_t, 5.0 + 3.0) << rank;  // ...and within a few polls of it
  }
  expect_no_process_left(run_dir);
}

// A rank that has written its end (run_end) and then does not exit (an external trainer's slow or stuck
// teardown: a barrier, the interpreter's shutdown) is no stall: the launcher waits the teardown bound
// (core/protocol.h teardown_grace_s: 10 s here), then kills it with a warning; its telemetry is complete,
// so the run is completed, not failed, and no `stopped` event follows its run_end.
// A healthy 2-rank, 3-step scenario whose trainer is trainer.sh in the scratch directory (it writes the
// telemetry itself), with a 2 s collective timeout.
std::string shell_trainer_scenario(const std::string& name) {
  return "name: " + name + R"(
seed: 7
world_size: 2
steps: 3
heartbeat_s: 0.2
collective_timeout_s: 2
trainer: {command: "sh trainer.sh", cwd: .}
expect: {cause: healthy}
)";
}

TEST(EndToEnd, ARankThatWroteItsEndButDoesNotExitIsKilledAfterTheTeardownBoundAndTheRunCompletes) {
  const std::string d = scratch();
  write(d, "trainer.sh", R"(f="$FLATLINE_RUN_DIR/telemetry/rank-$RANK.jsonl"
for s in 1 2 3; do
  echo "{\"kind\":\"step\",\"rank\":$RANK,\"t\":0.$s,\"step\":$s,\"opt_step\":$s,\"loss\":2.5,\"lr\":0.001}" >> "$f"
done
echo "{\"kind\":\"event\",\"rank\":$RANK,\"t\":0.5,\"step\":3,\"name\":\"run_end\"}" >> "$f"
exec sleep 120
)");
  Ran r = run("run " + write(d, "s.yaml", shell_trainer_scenario("e2e-slow-teardown")) + " --out " + d + "/runs");
  EXPECT_NE(r.out.find("[watchdog] every rank still running wrote its end but had not exited 10 s later"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("no record from any rank"), std::string::npos) << r.out;
  EXPECT_GT(r.seconds, 10) << r.out;
  EXPECT_LT(r.seconds, 10 + 15) << r.out;
  const std::string run_dir = d + "/runs/e2e-slow-teardown";
  const auto m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "completed") << m.error;
  EXPECT_EQ(m.error, "");
  std::ifstream w(run_dir + "/telemetry_warnings.txt");
  const std::string warnings((std::istreambuf_iterator<char>(w)), std::istreambuf_iterator<char>());
  EXPECT_NE(warnings.find("rank 0 wrote its end but had not exited"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("rank 1 wrote its end but had not exited"), std::string::npos) << warnings;
  for (int rank = 0; rank < 2; ++rank) {
    const auto recs = flatline::read_jsonl(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr);
    ASSERT_FALSE(recs.empty());
    EXPECT_EQ(recs.back().name, "run_end") << rank;
  }
  expect_no_process_left(d);
}

// A process that aborts in its teardown (after its run_end) leaves the run completed, with a warning; the
// same abort before its run_end is the run's error.
TEST(EndToEnd, ARankThatAbortsAfterItsEndIsAWarningAndBeforeItIsTheRunsError) {
  for (const bool after_end : {true, false}) {
    const std::string d = scratch();
    write(d, "trainer.sh", std::string(R"(f="$FLATLINE_RUN_DIR/telemetry/rank-$RANK.jsonl"
for s in 1 2 3; do
  echo "{\"kind\":\"step\",\"rank\":$RANK,\"t\":0.$s,\"step\":$s,\"opt_step\":$s,\"loss\":2.5,\"lr\":0.001}" >> "$f"
done
)") + (after_end ? R"(echo "{\"kind\":\"event\",\"rank\":$RANK,\"t\":0.5,\"step\":3,\"name\":\"run_end\"}" >> "$f"
)" : "") + R"(if [ "$RANK" = 1 ]; then echo "terminate called without an active exception" >&2; kill -ABRT $$; fi
)" + (after_end ? "" : R"(echo "{\"kind\":\"event\",\"rank\":$RANK,\"t\":0.5,\"step\":3,\"name\":\"run_end\"}" >> "$f"
)"));
    Ran r = run("run " + write(d, "s.yaml", shell_trainer_scenario("e2e-abort-at-exit")) + " --out " + d + "/runs");
    const std::string run_dir = d + "/runs/e2e-abort-at-exit";
    const auto m = flatline::read_manifest(run_dir + "/manifest.json");
    std::ifstream w(run_dir + "/telemetry_warnings.txt");
    const std::string warnings((std::istreambuf_iterator<char>(w)), std::istreambuf_iterator<char>());
    if (after_end) {
      EXPECT_EQ(r.status, 0) << r.out;
      EXPECT_EQ(m.status, "completed") << m.error;
      EXPECT_EQ(m.error, "");
      EXPECT_NE(warnings.find("rank 1 exited with"), std::string::npos) << warnings;
      EXPECT_NE(warnings.find("after its run_end (in teardown; its telemetry is complete): terminate called"),
                std::string::npos) << warnings;
    } else {
      EXPECT_NE(r.status, 0) << r.out;
      EXPECT_EQ(m.status, "failed");
      EXPECT_NE(m.error.find("rank 1 exited with"), std::string::npos) << m.error;
      EXPECT_NE(m.error.find("terminate called without an active exception"), std::string::npos) << m.error;
    }
    expect_no_process_left(d);
  }
}

TEST(EndToEnd, BadScenarioNamesFileLineAndKey) {
  const std::string d = scratch();
  const std::string path = write(d, "bad.yaml", std::string("name: bad\n") + kBase + "steps: 10\nbogus_key: 1\nexpect: {cause: healthy}\n");
  Ran r = run("run " + path + " --out " + d + "/runs");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find(path + ":10:1: unknown key 'bogus_key'"), std::string::npos) << r.out;
}

// `flatline score` over a directory: progress lines, the scoreboard, JSON and JUnit files, and an exit
// status that says whether every expectation was met.
TEST(EndToEnd, ScoreRunsASuiteAndWritesJunit) {
  const std::string d = scratch();
  fs::create_directories(d + "/suite");
  write(d + "/suite", "a.yaml", std::string("name: e2e-suite-healthy\n") + kBase +
                                    "steps: 30\nschedule: {kind: cosine, warmup: 5}\nexpect: {cause: healthy}\n");
  write(d + "/suite", "b.yaml", std::string("name: e2e-suite-zero-grad\n") + kBase + R"(steps: 40
schedule: {kind: constant}
faults:
  - {kind: zero_grad_rank, at: 20, target: {rank: 0}, params: {mode: skipped_backward}}
expect: {cause: zero_grad_rank, rank: 0, within_steps: 2}
)");
  Ran r = run("score " + d + "/suite --out " + d + "/runs --json " + d + "/s.json --junit " + d + "/s.xml");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[1/2] e2e-suite-healthy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accuracy: 2/2 (100.0%)"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(std::ifstream(d + "/s.json"));
  EXPECT_EQ(j["summary"]["correct"], 2);
  EXPECT_EQ(j["runs"].size(), 2u);
  std::ifstream x(d + "/s.xml");
  std::string xml((std::istreambuf_iterator<char>(x)), std::istreambuf_iterator<char>());
  EXPECT_NE(xml.find("tests=\"2\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("failures=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"e2e-suite-zero-grad\""), std::string::npos) << xml;
}

// A scenario never replaces a directory that is not a run directory (a name like '..' is refused by
// the loader; this is the launcher's own guard).
TEST(EndToEnd, RunRefusesToReplaceADirectoryThatIsNotARun) {
  const std::string d = scratch();
  fs::create_directories(d + "/runs/e2e-guard");
  std::ofstream(d + "/runs/e2e-guard/precious.txt") << "keep me";
  const std::string yaml = std::string("name: e2e-guard\n") + kBase + "steps: 5\nexpect: {cause: healthy}\n";
  Ran r = run("run " + write(d, "s.yaml", yaml) + " --out " + d + "/runs");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is not a flatline run directory"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d + "/runs/e2e-guard/precious.txt"));
  Ran e = run("score " + d + "/nothing-here-" + std::to_string(std::random_device{}()) + " --out " + d + "/runs");
  EXPECT_NE(e.status, 0) << e.out;
}

}  // namespace
