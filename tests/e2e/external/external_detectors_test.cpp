// End to end: external detectors through `flatline score`, on the recorded main suite (the ctest
// fixture record_main_corpus records it once, FLATLINE_TEST_CORPUS) and live on short runs: what each
// kind of detector scores, the built-in suite as an external detector, and every way a detector can
// fail, each with its verdict in bounded time and the training's telemetry complete on disk.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "telemetry/jsonl.h"
#include "tests/e2e/no_process_left.h"

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

struct Ran {
  int status;
  std::string out;
  double seconds;
};

Ran flatline(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((std::string(FLATLINE_BIN) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WEXITSTATUS(st), out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

Ran e2e_run(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  return {WEXITSTATUS(pclose(p)), out, 0};
}

std::string python() {
  const char* p = std::getenv("FLATLINE_PYTHON");
  return p && *p ? p : FLATLINE_PYTHON_DEFAULT[0] ? FLATLINE_PYTHON_DEFAULT : "python3";
}

std::string scratch() {
  auto d = fs::temp_directory_path() / ("flatline-ext-" + std::to_string(std::random_device{}() % 10000000));
  fs::create_directories(d);
  return d.string();
}

std::string corpus() {
  const char* c = std::getenv("FLATLINE_TEST_CORPUS");
  return c ? c : "";
}

json read_json(const std::string& path) { return json::parse(std::ifstream(path)); }

// {scenario: run} of one detector in the scoreboard JSON
std::map<std::string, json> runs_of(const json& j, const std::string& detector) {
  std::map<std::string, json> out;
  for (const auto& r : j["detectors"][detector]["runs"]) out[r["scenario"]] = r;
  return out;
}

const char* kTiny = R"(name: NAME
seed: 3
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: 2
batch_size: 8
optimizer: {kind: adamw, lr: 3.0e-3}
heartbeat_s: 0.2
steps: 60
schedule: {kind: cosine, warmup: 5, total: 60, min_lr: 3.0e-4}
formats: {write: [tensorboard]}
faults:
  - {kind: lr_zero, at: 40, target: {rank: all}, params: {mode: schedule_total_too_short}}
expect: {cause: lr_zero, within_steps: 12}
)";

std::string tiny(const std::string& dir, const std::string& name) {
  std::string y = kTiny;
  y.replace(y.find("NAME"), 4, name);
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << y;
  return path;
}

TEST(ExternalDetectors, NeverAlarmingGetsTheHealthyRunsRightAndEveryFaultMissed) {
  ASSERT_FALSE(corpus().empty());
  const std::string d = scratch();
  Ran r = flatline("score " + corpus() + " --detector silent='cat > /dev/null' --json " + d + "/s.json");
  EXPECT_EQ(r.status, 1) << r.out;  // below the bar: the silent detector misses every fault
  json j = read_json(d + "/s.json");
  const json& s = j["detectors"]["silent"];
  EXPECT_EQ(s["cause"]["summary"]["runs"], 8);
  EXPECT_EQ(s["cause"]["summary"]["correct"], 2);
  EXPECT_EQ(s["detection"]["healthy_runs"], 2);
  EXPECT_EQ(s["detection"]["healthy_alarms"], 0);
  EXPECT_EQ(s["detection"]["faulty_runs"], 6);
  EXPECT_EQ(s["detection"]["faults_detected"], 0);
  for (const auto& [name, run] : runs_of(j, "silent"))
    EXPECT_EQ(run["result"], name.rfind("healthy", 0) == 0 ? "ok" : "MISS") << name;
  EXPECT_EQ(j["corpus"]["id"].get<std::string>().size(), 32u);
  EXPECT_NE(r.out.find("corpus: " + corpus() + " (8 runs, xxh3-128 "), std::string::npos) << r.out;
}

TEST(ExternalDetectors, NamingLrZeroOnTheFirstRecordIsEarlyAndAFalseAlarmOnEveryHealthyRun) {
  const std::string d = scratch();
  Ran r = flatline("score " + corpus() + R"( --detector eager='head -n 1 > /dev/null; echo "{\"cause\": \"lr_zero\"}"; cat > /dev/null' --json )" +
                   d + "/s.json");
  EXPECT_EQ(r.status, 1) << r.out;
  json j = read_json(d + "/s.json");
  const json& s = j["detectors"]["eager"];
  EXPECT_EQ(s["detection"]["healthy_alarms"], 2);
  EXPECT_DOUBLE_EQ(s["detection"]["false_alarms_per_healthy_run"].get<double>(), 1.0);
  EXPECT_EQ(s["cause"]["summary"]["correct"], 0);
  auto runs = runs_of(j, "eager");
  EXPECT_EQ(runs["lr-zero-gpt"]["result"], "EARLY");
  EXPECT_EQ(runs["lr-zero-gpt"]["alarms"][0]["step"], 0);  // the first record: rank 0's run_start event
  EXPECT_EQ(runs["healthy-fp16-gpt"]["result"], "FALSE ALARM");
  EXPECT_NE(r.out.find("false alarm on a healthy run: eager: healthy-gpt: lr_zero at step 0"), std::string::npos) << r.out;
}

// The built-in suite through the protocol (`flatline detect` in the lock-step replay) scores as built
// in: cause, rank, result and latency in steps; in seconds, the stamp is the record on which the
// finding fired (a detector waiting for every rank fires on the later rank's record), within a step.
TEST(ExternalDetectors, BuiltinSuiteAsAnExternalDetectorGetsTheSameScoreboard) {
  const std::string d = scratch();
  Ran r = flatline("score " + corpus() + " --detector builtin='" + FLATLINE_BIN + " detect' --json " + d + "/s.json");
  EXPECT_LE(r.status, 1) << r.out;  // 1 only if the built-in suite itself missed on this recording
  json j = read_json(d + "/s.json");
  EXPECT_EQ(j["detectors"]["builtin"]["cause"]["summary"], j["detectors"]["flatline"]["cause"]["summary"]);
  EXPECT_EQ(j["detectors"]["builtin"]["cause"]["confusion"], j["detectors"]["flatline"]["cause"]["confusion"]);
  auto ext = runs_of(j, "builtin"), in = runs_of(j, "flatline");
  ASSERT_EQ(ext.size(), 8u);
  for (const auto& [name, run] : in) {
    for (const char* k : {"result", "said", "detected", "early", "detect_latency_steps", "expect_met"})
      EXPECT_EQ(ext[name][k], run[k]) << name << " " << k;
    if (run["detect_latency_s"].is_number())
      // within a fraction of the heartbeat interval (the main suite's default heartbeat_s, 0.5 s): a hang
      // fires on a heartbeat, and the two stamps may fall on heartbeats of different ranks (0.09 s apart
      // seen on a loaded host)
      EXPECT_NEAR(ext[name]["detect_latency_s"].get<double>(), run["detect_latency_s"].get<double>(), 0.2) << name;
  }
  EXPECT_EQ(ext["zero-grad-rank-gpt"]["alarms"][0]["rank"], 1);
}

TEST(ExternalDetectors, ATamperedCorpusIsRefusedBeforeAnythingIsScored) {
  const std::string d = scratch();
  fs::copy(corpus(), d + "/c", fs::copy_options::recursive);
  std::ofstream(d + "/c/lr-zero-gpt/telemetry/rank-1.jsonl", std::ios::app) << "\n";
  Ran r = flatline("score " + d + "/c");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("run lr-zero-gpt: telemetry/rank-1.jsonl changed since it was recorded"), std::string::npos) << r.out;
}

TEST(ExternalDetectors, ExamplesScoreOnTheCorpusWithoutErrors) {
  const std::string d = scratch();
  Ran r = flatline("score " + corpus() + " --detector threshold='python3 " + FLATLINE_SOURCE_DIR +
                   "/examples/detectors/threshold.py' --json " + d + "/s.json");
  json j = read_json(d + "/s.json");
  EXPECT_EQ(j["detectors"]["threshold"]["errors"], 0) << r.out;
  EXPECT_EQ(runs_of(j, "threshold")["zero-grad-rank-gpt"]["result"], "ok") << r.out;
  // The TensorBoard-package watcher on the whole corpus, its event files re-enacted (--formats), paced
  // at 4x the recorded clock: no detector error, and lr_zero named on the lr-zero run.
  if (e2e_run(python() + " -c 'import tensorboard'").status != 0) GTEST_SKIP() << "no tensorboard package for " << python();
  r = flatline("score " + corpus() + " --formats tensorboard,wandb-run --speed 4 --detector tbwatch='" + python() + " " +
               FLATLINE_SOURCE_DIR + "/examples/detectors/tensorboard_watch.py' --detector wbwatch='python3 " +
               FLATLINE_SOURCE_DIR + "/examples/detectors/wandb_watch.py' --json " + d + "/w.json");
  j = read_json(d + "/w.json");
  for (const char* det : {"tbwatch", "wbwatch"}) {
    EXPECT_EQ(j["detectors"][det]["errors"], 0) << det << "\n" << r.out;
    EXPECT_EQ(runs_of(j, det)["lr-zero-gpt"]["result"], "ok") << det << "\n" << r.out;
  }
}

// Live: a detector that watches the TensorBoard file the harness writes is scored like one on stdin.
// The watcher polls the event file, so it sees lr 0 some steps late on a loaded host: the tiny
// scenario allows 12 steps (of 20 after the onset).
TEST(ExternalDetectors, TensorBoardWatcherIsScoredLiveOnLrZero) {
  const std::string d = scratch();
  Ran r = flatline("score " + tiny(d, "ext-tb") + " --out " + d + "/runs --detector tb='python3 " +
                   FLATLINE_SOURCE_DIR + "/examples/detectors/tensorboard_lr.py' --gate tb --json " + d + "/s.json");
  EXPECT_EQ(r.status, 0) << r.out;
  json j = read_json(d + "/s.json");
  auto run = runs_of(j, "tb")["ext-tb"];
  EXPECT_EQ(run["result"], "ok") << r.out;
  EXPECT_EQ(run["alarms"][0]["cause"], "lr_zero");
  // The harness's stamp: never before the fault (step 40), although rank 0 writes the event file ahead
  // of the launcher's feed (the stamp is the newest step on disk when the alarm came, if later).
  ASSERT_TRUE(run["alarms"][0]["step"].is_number()) << run.dump();
  EXPECT_GE(run["alarms"][0]["step"].get<int>(), 40) << run.dump();
  EXPECT_GE(run["alarms"][0]["claimed_step"].get<int>(), 40) << run.dump();
  EXPECT_FALSE(fs::is_empty(d + "/runs/ext-tb/formats/tensorboard"));
  // Replayed, the detector sees the event file re-written at the pace it reads: the same verdict.
  Ran again = flatline("score " + d + "/runs --detector tb='python3 " + FLATLINE_SOURCE_DIR +
                       "/examples/detectors/tensorboard_lr.py' --gate tb --json " + d + "/r.json");
  EXPECT_EQ(again.status, 0) << again.out;
  auto replayed = runs_of(read_json(d + "/r.json"), "tb")["ext-tb"];
  EXPECT_EQ(replayed["result"], "ok") << again.out;
  EXPECT_GE(replayed["alarms"][0]["step"].get<int>(), 40) << replayed.dump();
}

// The shape most teams write: a watcher with the real `tensorboard` package that closes stdin and tails
// the event files (examples/detectors/tensorboard_watch.py). Live and replayed from the recording, it
// names lr_zero with no detector error, stamped by the harness never before the fault; it ends at the
// harness's SIGTERM, and nothing of it is left (the listener of no_process_left.h).
// A watcher that tails the W&B offline run's transaction log as the client appends it
// (examples/detectors/wandb_watch.py, standard library only): live and replayed, lr_zero named, stamped
// never before the fault, no detector error.
TEST(ExternalDetectors, AWandbOfflineRunWatcherIsScoredLiveAndReplayed) {
  const std::string d = scratch();
  const std::string det = " --formats wandb-run --detector wbwatch='python3 " + std::string(FLATLINE_SOURCE_DIR) +
                          "/examples/detectors/wandb_watch.py' --gate wbwatch";
  Ran r = flatline("score " + tiny(d, "ext-wbw") + " --out " + d + "/runs" + det + " --json " + d + "/s.json");
  EXPECT_NE(r.status, 4) << r.out;
  Ran again = flatline("score " + d + "/runs" + det + " --json " + d + "/r.json");
  EXPECT_NE(again.status, 4) << again.out;
  for (const std::string& json_file : {d + "/s.json", d + "/r.json"}) {
    auto run = runs_of(read_json(json_file), "wbwatch")["ext-wbw"];
    EXPECT_TRUE(run["error"].is_null()) << json_file << ": " << run.dump();
    EXPECT_EQ(run["result"], "ok") << json_file << ": " << run.dump();
    ASSERT_FALSE(run["alarms"].empty()) << json_file << ": " << run.dump();
    EXPECT_GE(run["alarms"][0]["step"].get<int>(), 40) << json_file << ": " << run.dump();
    EXPECT_EQ(run["alarms"][0]["claimed_step"].get<int>(), 40) << json_file << ": " << run.dump();
  }
  EXPECT_FALSE(fs::is_empty(d + "/runs/ext-wbw/formats/wandb-run/wandb"));
}

TEST(ExternalDetectors, ATensorBoardPackageWatcherThatClosesStdinIsScoredLiveAndReplayed) {
  if (e2e_run(python() + " -c 'import tensorboard'").status != 0) GTEST_SKIP() << "no tensorboard package for " << python();
  const std::string d = scratch();
  const std::string det = " --detector tbwatch='" + python() + " " + FLATLINE_SOURCE_DIR +
                          "/examples/detectors/tensorboard_watch.py' --gate tbwatch";
  Ran r = flatline("score " + tiny(d, "ext-tbw") + " --out " + d + "/runs" + det + " --json " + d + "/s.json");
  EXPECT_NE(r.status, 4) << r.out;
  for (const std::string& json_file : {d + "/s.json", d + "/r.json", d + "/p.json"}) {
    if (json_file != d + "/s.json") {  // replayed: unpaced (its files grow by the recorded clock), then paced
      Ran again = flatline("score " + d + "/runs" + det + (json_file == d + "/p.json" ? " --speed 2" : "") +
                           " --json " + json_file);
      EXPECT_NE(again.status, 4) << again.out;
    }
    auto run = runs_of(read_json(json_file), "tbwatch")["ext-tbw"];
    EXPECT_TRUE(run["error"].is_null()) << json_file << ": " << run.dump();
    EXPECT_EQ(run["result"], "ok") << json_file << ": " << run.dump();
    ASSERT_FALSE(run["alarms"].empty()) << json_file << ": " << run.dump();
    EXPECT_EQ(run["alarms"][0]["cause"], "lr_zero");
    EXPECT_GE(run["alarms"][0]["step"].get<int>(), 40) << json_file << ": " << run.dump();
    EXPECT_EQ(run["alarms"][0]["claimed_step"].get<int>(), 40) << json_file << ": " << run.dump();
  }
}

// Every way a detector can fail, attached together to one live run: each gets its verdict with the
// reason, within bounded time; training is not slowed into failure and its telemetry is complete.
TEST(ExternalDetectors, BrokenDetectorsGetTheirVerdictAndTrainingIsUntouched) {
  const std::string d = scratch();
  const std::string dets =
      " --detector crash='head -n 3 > /dev/null; echo boom >&2; exit 3'"
      " --detector hang='cat > /dev/null; sleep 600'"
      " --detector garbage='read -r l; echo loss looks flat; cat > /dev/null'"
      R"( --detector flood='yes "{\"cause\": \"lr_zero\"}"')"
      " --detector unread='sleep 600'"
      R"( --detector slow='grep -m 1 "\"step\":45," > /dev/null; sleep 2; echo "{\"cause\": \"lr_zero\"}"; cat > /dev/null')";
  Ran r = flatline("score " + tiny(d, "ext-broken") + " --out " + d + "/runs --detector-stall-s 3 --detector-exit-s 3" +
                   dets + " --json " + d + "/s.json");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_LT(r.seconds, 90) << r.out;
  json j = read_json(d + "/s.json");
  auto error = [&](const std::string& det) { return runs_of(j, det)["ext-broken"]["error"]; };
  EXPECT_EQ(error("crash"), "exited with status 3");
  EXPECT_EQ(runs_of(j, "crash")["ext-broken"]["stderr_tail"], "boom");
  EXPECT_EQ(error("hang"), "hang: did not exit within 3 s of the end of its input");
  EXPECT_EQ(error("garbage"), "garbage on stdout line 1: not a JSON object: 'loss looks flat'");
  EXPECT_EQ(error("flood"), "flood: more than 1000 alarm lines");
  // never reading stdin is a file watcher (docs/DETECTORS.md "Two shapes"): no error, ended at the end
  EXPECT_TRUE(error("unread").is_null()) << error("unread");
  EXPECT_EQ(runs_of(j, "unread")["ext-broken"]["result"], "MISS");
  EXPECT_TRUE(error("slow").is_null()) << error("slow");
  // the harness measured the slow one's latency: >= the 2 s it slept after seeing step 45 (onset 40)
  auto slow = runs_of(j, "slow")["ext-broken"];
  EXPECT_GE(slow["detect_latency_s"].get<double>(), 2.0) << slow.dump();
  EXPECT_EQ(runs_of(j, "flatline")["ext-broken"]["result"], "ok");
  for (int rank = 0; rank < 2; ++rank) {
    int steps = 0;
    for (const auto& rec : flatline::read_jsonl(d + "/runs/ext-broken/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
      steps += rec.kind == flatline::RecordKind::step;
    EXPECT_EQ(steps, 60) << "rank " << rank;
  }
  EXPECT_NE(r.out.find("detector error: crash on ext-broken: exited with status 3"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d + "/runs/ext-broken/detectors/crash.stderr"));
}

TEST(ExternalDetectors, UsageErrorsAreExitStatus2) {
  EXPECT_EQ(flatline("score " + corpus() + " --detector nocommand").status, 2);
  EXPECT_EQ(flatline("score " + corpus() + " --detector flatline='cat'").status, 2);
  EXPECT_EQ(flatline("score " + corpus() + " --detector a='cat' --detector a='cat'").status, 2);
  EXPECT_EQ(flatline("score " + corpus() + " --formats comet").status, 2);
  EXPECT_EQ(flatline("score " + corpus() + " --gate nobody").status, 2);
}

}  // namespace
