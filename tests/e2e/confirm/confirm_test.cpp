// End to end: `flatline score --confirm` and `flatline confirm` on the recorded main suite (the ctest
// fixture main_corpus records it once, FLATLINE_TEST_CORPUS; each test works on a copy): every fault
// of the suite confirmed and every confirmation right; the control reproducing the run's step records
// bit for bit on every rank; each repair visible in its replay's telemetry; a wrong diagnosis not
// confirmed; nothing to confirm on a healthy run; the report's loss curves; the exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "telemetry/jsonl.h"
#include "tests/e2e/no_process_left.h"

namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using flatline::Record;
using flatline::RecordKind;

struct Ran {
  int status;
  std::string out;
};

Ran flatline_cmd(const std::string& args) {
  FILE* p = popen((std::string(FLATLINE_BIN) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WEXITSTATUS(st), out};
}

std::string scratch(const std::string& name) {
  auto d = fs::temp_directory_path() / ("flatline-confirm-" + name + "-" + std::to_string(std::random_device{}() % 10000000));
  fs::create_directories(d);
  return d.string();
}

// A copy of the recorded main suite (a test never writes into the fixture).
std::string copy_of_corpus(const std::string& name) {
  const char* c = std::getenv("FLATLINE_TEST_CORPUS");
  if (!c || !fs::exists(std::string(c) + "/corpus.json")) return "";
  const std::string d = scratch(name) + "/runs";
  fs::copy(c, d, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(d))
    if (e.is_directory()) fs::remove_all(e.path() / "confirm");  // a previous confirmation's
  return d;
}

json read_json(const std::string& path) { return json::parse(std::ifstream(path)); }

std::vector<Record> steps_of(const std::string& run, int rank) {
  std::vector<Record> out;
  for (const auto& r : flatline::read_jsonl(run + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
    if (r.kind == RecordKind::step) out.push_back(r);
  return out;
}

// The step records of a rank without the wall-clock fields (t, step_ms, comm_ms), by the step they
// trained (samples_seen / 16: the suite's batch size); a step trained twice keeps its last record.
std::map<int64_t, std::string> deterministic(const std::string& run, int rank, int64_t per_step = 16) {
  std::map<int64_t, std::string> out;
  for (Record r : steps_of(run, rank)) {
    r.t = 0;
    r.step_ms.reset();
    r.comm_ms.reset();
    out[*r.samples_seen / per_step] = flatline::to_json(r);
  }
  return out;
}

// `flatline score COPY --confirm` once, for every test of the suite (ctest runs this program as one test).
class ScoreConfirm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runs_ = copy_of_corpus("score");
    if (runs_.empty()) return;
    const std::string json_file = runs_ + "/../score.json";
    ran_ = flatline_score(runs_ + " --confirm --json " + json_file + " --junit " + runs_ + "/../score.xml");
    if (fs::exists(json_file)) board_ = read_json(json_file);
  }
  void SetUp() override {
    if (runs_.empty()) GTEST_SKIP() << "no recorded main suite (FLATLINE_TEST_CORPUS; ctest runs main_suite first)";
  }
  static std::map<std::string, json> confirmations() {
    std::map<std::string, json> out;
    for (const auto& c : board_["confirmations"]["runs"]) out[c["scenario"]] = c;
    return out;
  }
  static Ran flatline_score(const std::string& args) { return flatline_cmd("score " + args); }
  static Ran flatline_cmd(const std::string& args) { return ::flatline_cmd(args); }
  static std::string runs_;
  static Ran ran_;
  static json board_;
};
std::string ScoreConfirm::runs_;
Ran ScoreConfirm::ran_;
json ScoreConfirm::board_;

}  // namespace

// Every fault scenario of the main suite: its diagnosis confirmed; the healthy ones: nothing to confirm.
TEST_F(ScoreConfirm, EveryFaultOfTheMainSuiteIsConfirmed) {
  EXPECT_EQ(ran_.status, 0) << ran_.out;
  const auto c = confirmations();
  ASSERT_EQ(c.size(), 8u) << ran_.out;
  for (const auto& [name, one] : c) {
    const bool healthy = name.rfind("healthy", 0) == 0;
    EXPECT_EQ(one["verdict"], healthy ? "nothing to confirm" : "confirmed") << name << ": " << one["reason"];
    EXPECT_TRUE(one["right"].get<bool>()) << name;
    if (!healthy) {
      EXPECT_GT(one["margin"].get<double>(), one["needed"].get<double>()) << name;
      // the replays trained the plateau (onset to end), and at most twice it (bench/README.md)
      const json plan = read_json(runs_ + "/" + name + "/confirm/confirm.json")["plan"];
      const int64_t plateau = plan["end"].get<int64_t>() - plan["onset"].get<int64_t>() + 1;
      EXPECT_EQ(plan["plateau_steps"], plateau) << name;
      EXPECT_GE(one["steps_trained"].get<int64_t>(), plateau) << name;
      EXPECT_LE(one["steps_trained"].get<int64_t>(), 2 * plateau) << name;
    }
  }
  EXPECT_EQ(board_["confirmations"]["right"], 8);
  EXPECT_NE(ran_.out.find("confirmations right: 8/8"), std::string::npos) << ran_.out;
  // the same in JUnit, on the built-in suite's testcases
  std::ifstream x(runs_ + "/../score.xml");
  const std::string xml((std::istreambuf_iterator<char>(x)), {});
  EXPECT_NE(xml.find("<property name=\"confirmed\" value=\"confirmed\"/>"), std::string::npos);
  EXPECT_EQ(xml.find("type=\"confirmation\""), std::string::npos);
}

// A checkpoint near each finding (docs/DESIGN.md §8): the launcher asked for one when the detector fired,
// and every rank wrote it at one step, after the detection; the confirmation branches from it and
// re-trains no prefix. Not the hang: its ranks were blocked when it was found.
TEST_F(ScoreConfirm, EveryFaultButTheHangBranchesFromALiveCheckpointWithoutAPrefix) {
  for (const char* name : {"lr-zero-gpt", "data-replay-gpt", "loss-scale-collapse-gpt", "zero-grad-rank-gpt",
                           "zero-grad-rank-cnn"}) {
    const std::string run = runs_ + "/" + name;
    const json c = read_json(run + "/confirm/confirm.json"), plan = c["plan"];
    const json d = read_json(run + "/diagnosis.json");
    EXPECT_FALSE(c["replays"]["prefix"]["ran"].get<bool>()) << name;
    const int64_t branch = plan["branch"], onset = plan["onset"];
    EXPECT_GE(branch, onset - 1) << name;
    EXPECT_EQ(plan["checkpoint"], branch) << name;
    std::vector<int64_t> live;
    for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
      const std::string n = e.path().filename().string();
      if (n.rfind("live-step-", 0) != 0) continue;
      live.push_back(std::stoll(n.substr(10)));
      for (const char* f : {"/COMPLETE", "/rank-0.pt", "/rank-1.pt"}) EXPECT_TRUE(fs::exists(e.path().string() + f)) << n;
    }
    ASSERT_FALSE(live.empty()) << name;
    EXPECT_LE(live.size(), 3u) << name;  // kMaxLiveCheckpoints
    const int64_t first = *std::min_element(live.begin(), live.end());
    EXPECT_GE(first, d["detected_step"].get<int64_t>()) << name;
    if (branch > onset - 1) EXPECT_EQ(branch, first) << name;  // else a checkpoint of the scenario's at the branch
    for (int rank = 0; rank < 2; ++rank) {  // the event, at that step, on every rank
      bool saved = false;
      for (const auto& r : flatline::read_jsonl(run + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
        saved |= r.kind == RecordKind::event && r.name == "checkpoint_save" && r.step == first &&
                 r.detail.find("live-step-") != std::string::npos;
      EXPECT_TRUE(saved) << name << " rank " << rank;
    }
  }
  EXPECT_TRUE(read_json(runs_ + "/run-not-alive-gpt/confirm/confirm.json")["replays"]["prefix"]["ran"].get<bool>());
}

// The control (the prefix, then the control branch) logs the run's step records, on every rank, bit for
// bit but for the wall-clock fields: where the run and its replay differ, they do by design (the
// replay's start, its branch-point checkpoint and the held-out evaluations are events and eval records).
TEST_F(ScoreConfirm, TheControlReproducesTheRunsRecordsBitForBit) {
  for (const char* name : {"lr-zero-gpt", "data-replay-gpt", "loss-scale-collapse-gpt", "zero-grad-rank-gpt",
                           "run-not-alive-gpt"}) {
    const std::string run = runs_ + "/" + name, c = run + "/confirm";
    const json plan = read_json(c + "/confirm.json")["plan"];
    const int64_t from = std::max<int64_t>(plan["checkpoint"].get<int64_t>(), 0) + 1, branch = plan["branch"];
    for (int rank = 0; rank < 2; ++rank) {
      auto original = deterministic(run, rank);
      // (no prefix where the replays branch from a checkpoint at or after the onset)
      auto as_was = fs::exists(c + "/prefix") ? deterministic(c + "/prefix", rank) : std::map<int64_t, std::string>{};
      for (const auto& [k, line] : deterministic(c + "/control", rank)) as_was[k] = line;
      ASSERT_FALSE(as_was.empty()) << name;
      EXPECT_EQ(as_was.begin()->first, from) << name;
      std::map<int64_t, std::string> window(original.lower_bound(from), original.end());
      ASSERT_EQ(as_was.size(), window.size()) << name << " rank " << rank;
      for (const auto& [k, line] : window) EXPECT_EQ(as_was[k], line) << name << " rank " << rank << " step " << k;
      // the repaired replay starts from the same checkpoint and differs only after it
      EXPECT_EQ(deterministic(c + "/repaired", rank).begin()->first, branch + 1) << name;
    }
  }
}

// Each repair, seen in its replay's telemetry.
TEST_F(ScoreConfirm, EachRepairShowsInTheRepairedReplaysTelemetry) {
  const std::string r = runs_ + "/";
  for (const auto& x : steps_of(r + "lr-zero-gpt/confirm/repaired", 0))  // the lr held at the floor
    if (x.step >= 160) EXPECT_EQ(*x.lr, 3e-4) << x.step;
  for (const auto& x : steps_of(r + "zero-grad-rank-gpt/confirm/repaired", 1))  // rank 1's gradient back
    EXPECT_GT(*x.local_grad_norm, 0.0) << x.step;
  for (const auto& x : steps_of(r + "loss-scale-collapse-gpt/confirm/repaired", 0))  // the scale at 2^16
    EXPECT_EQ(*x.loss_scale, 65536.0) << x.step;
  std::set<uint64_t> batches;  // fresh data: no batch twice
  for (const auto& x : steps_of(r + "data-replay-gpt/confirm/repaired", 0)) EXPECT_TRUE(batches.insert(*x.batch_hash).second) << x.step;
  EXPECT_EQ(steps_of(r + "run-not-alive-gpt/confirm/repaired", 0).back().step, 240);  // no hang
  EXPECT_TRUE(steps_of(r + "run-not-alive-gpt/confirm/control", 0).empty());         // the control hung again
}

// The recorded runs, their confirmations beside them, are still a corpus (confirm/ is not hashed) and
// a recursive search does not mistake the replays' scenario.yaml for scenarios to train.
TEST_F(ScoreConfirm, TheCorpusStillVerifiesAndReplaysAreNotScenarios) {
  const Ran again = flatline_score(runs_);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("[8/8]"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("[9/"), std::string::npos) << again.out;
  const Ran dir = flatline_score(runs_ + "/..");  // not the corpus: a directory searched for runs and scenarios
  EXPECT_NE(dir.out.find("[8/8]"), std::string::npos) << dir.out;
  EXPECT_EQ(dir.out.find("[9/"), std::string::npos) << dir.out;  // the replays' scenario.yaml are not trained
  EXPECT_EQ(dir.out.find(" (2 ranks, "), std::string::npos) << dir.out;  // a run trained now, not a recorded one
}

TEST_F(ScoreConfirm, TheReportShowsBothLossCurvesAndTheNumbers) {
  const std::string html = runs_ + "/../lr-zero.html";
  const Ran r = flatline_cmd("report " + runs_ + "/lr-zero-gpt --html " + html);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(page.find("confirmation by counterfactual: <span class=\"ok\">confirmed</span>"), std::string::npos);
  EXPECT_NE(page.find("control (as the run was)"), std::string::npos);
  EXPECT_NE(page.find("repaired"), std::string::npos);
  size_t svgs = 0;
  for (size_t p = 0; (p = page.find("<svg", p)) != std::string::npos; ++p) ++svgs;
  EXPECT_EQ(svgs, 7u);  // the run's six plots and the confirmation's loss curves
}

// The lr_zero run's diagnosis rewritten to data_replay: the data_replay repair (the batch the step count
// implies) is the sampler's own batch on that run, so the repaired run is the control, bit for bit.
TEST_F(ScoreConfirm, AWrongDiagnosisIsNotConfirmed) {
  const std::string run = scratch("wrong") + "/lr-zero-gpt";
  fs::create_directories(run);
  for (const char* f : {"scenario.yaml", "telemetry", "checkpoints"})
    fs::copy(runs_ + "/lr-zero-gpt/" + f, run + "/" + f, fs::copy_options::recursive);
  json d = read_json(runs_ + "/lr-zero-gpt/diagnosis.json");
  ASSERT_EQ(d["cause"], "lr_zero");
  d["cause"] = "data_replay";
  std::ofstream(run + "/diagnosis.json") << d.dump();
  const Ran r = flatline_cmd("confirm " + run);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("NOT CONFIRMED"), std::string::npos) << r.out;
  const json c = read_json(run + "/confirm/confirm.json");
  EXPECT_EQ(c["verdict"], "not confirmed");
  EXPECT_TRUE(c["control_reproduces"]["faithful"].get<bool>());
  EXPECT_EQ(c["comparison"]["difference"].get<double>(), 0.0);
  EXPECT_TRUE(c["comparison"]["paired"].get<bool>());
}

TEST_F(ScoreConfirm, NothingToConfirmOrNothingToReplayHaveTheirExitCodes) {
  Ran r = flatline_cmd("confirm " + runs_ + "/healthy-gpt");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("NOTHING TO CONFIRM: the diagnosis is healthy"), std::string::npos) << r.out;
  const std::string run = scratch("straggler") + "/run";
  fs::copy(runs_ + "/healthy-gpt", run, fs::copy_options::recursive);
  std::ofstream(run + "/diagnosis.json") << R"({"cause": "straggler", "rank": 1, "onset_step": 50})";
  r = flatline_cmd("confirm " + run);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("fleet finding"), std::string::npos) << r.out;
  std::ofstream(run + "/diagnosis.json") << "{\"cause\": ";
  r = flatline_cmd("confirm " + run);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find(run + "/diagnosis.json: not JSON"), std::string::npos) << r.out;
  r = flatline_cmd("confirm " + runs_);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("not a flatline run directory"), std::string::npos) << r.out;
  // an --out that is something else is never replaced
  const std::string other = scratch("other");
  std::ofstream(other + "/keep.txt") << "mine";
  r = flatline_cmd("confirm " + runs_ + "/lr-zero-gpt --out " + other);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_TRUE(fs::exists(other + "/keep.txt"));
}
