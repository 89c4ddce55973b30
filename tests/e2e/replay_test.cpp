// End to end: a live `flatline run` and a `flatline replay` of its run directory give the same cause,
// onset, detected step and evidence (the replay merges the rank files by t; the live run tailed them);
// `flatline diagnose --json` gives the diagnosis.json the live run wrote.
#include <gtest/gtest.h>

#include "tests/e2e/sh.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

namespace {
namespace fs = std::filesystem;

using flatline::e2e::sh;

TEST(EndToEndReplay, ReplayOfALiveRunGivesItsDiagnosis) {
  auto d = fs::temp_directory_path() / ("flatline-e2e-replay-" + std::to_string(std::random_device{}() % 1000000));
  fs::create_directories(d);
  std::ofstream(d / "s.yaml") << R"(name: e2e-replay
seed: 5
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: 2
batch_size: 8
steps: 50
optimizer: {kind: adamw, lr: 3.0e-3}
heartbeat_s: 0.2
schedule: {kind: cosine, warmup: 5, total: 50, min_lr: 3.0e-4}
faults:
  - {kind: lr_zero, at: 30, target: {rank: all}, params: {mode: schedule_total_too_short}}
expect: {cause: lr_zero, within_steps: 3}
)";
  int st = 0;
  std::string out = sh("run " + (d / "s.yaml").string() + " --out " + (d / "runs").string(), &st);
  ASSERT_EQ(st, 0) << out;
  const fs::path run_dir = d / "runs" / "e2e-replay";
  auto live = nlohmann::json::parse(std::ifstream(run_dir / "diagnosis.json"));
  ASSERT_EQ(live["cause"], "lr_zero");

  out = sh("replay " + run_dir.string() + " --speed 1000", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find("FINDING lr_zero: onset step " + std::to_string(live["onset_step"].get<int>())), std::string::npos)
      << out;
  EXPECT_NE(out.find("diagnosis: lr_zero"), std::string::npos) << out;

  out = sh("diagnose " + run_dir.string() + " --json", &st);
  ASSERT_EQ(st, 0) << out;
  auto post = nlohmann::json::parse(out.substr(out.find('{')));
  for (const char* k : {"cause", "rank", "onset_step", "detected_step", "evidence"}) EXPECT_EQ(post[k], live[k]) << k;
}

}  // namespace
