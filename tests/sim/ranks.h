// Test helpers: run N real ranks of train_rank() as threads of this process (each with its own
// ProcessGroupGloo over one TCPStore), collect the first error, return every rank's result.
#pragma once
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/ports.h"
#include "faults/scenario_file.h"
#include "sim/trainer.h"
#include "telemetry/jsonl.h"

namespace flatline::test {

inline Scenario tiny_gpt(int world, int64_t steps) {
  return load_scenario_text(R"(
name: tiny
seed: 11
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: )" + std::to_string(world) + R"(
steps: )" + std::to_string(steps) + R"(
batch_size: 4
optimizer: {kind: adamw, lr: 1.0e-3}
schedule: {kind: cosine, warmup: 2}
heartbeat_s: 0.2
collective_timeout_s: 20
expect: {cause: healthy}
)", "<tiny>");
}

// A tiny 2-rank GPT (one layer, 16 wide, batches of 2, seed 5) with `extra` top-level keys and `faults`
// (YAML flow maps, one per fault): the scenarios of the fault-effect and replay tests.
inline Scenario tiny_effect_gpt(const std::string& extra, const std::vector<std::string>& faults, int64_t steps = 12) {
  std::string f;
  for (const auto& x : faults) f += (f.empty() ? "faults:\n" : "") + std::string("  - ") + x + "\n";
  return load_scenario_text(R"(
name: effect
seed: 5
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}
data: {kind: text}
world_size: 2
steps: )" + std::to_string(steps) + R"(
batch_size: 2
heartbeat_s: 0.2
)" + extra + f + "expect: {cause: healthy}\n",
                            "<effect>");
}

inline std::string temp_dir(const std::string& name) {
  static std::mt19937_64 rng(std::random_device{}());
  auto d = std::filesystem::temp_directory_path() / ("flatline-test-" + name + "-" + std::to_string(rng() % 1000000));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// A free port below the ephemeral range (core/ports.h: a kernel-picked one lets a rank connect to itself).
inline int test_port() { return free_tcp_port(); }

// `errors`: where each rank's error goes (a run expected to fail); without it, every rank must succeed.
// `configure`: sets more of each rank's options (a replay's).
inline std::vector<RankResult> run_ranks(const Scenario& s, const std::string& dir, bool resume = false,
                                         bool keep_params = true, std::vector<std::string>* errors_out = nullptr,
                                         const std::function<void(RankOptions&)>& configure = nullptr) {
  std::vector<RankResult> out(static_cast<size_t>(s.world_size));
  std::vector<std::string> errors(out.size());
  std::vector<std::thread> ts;
  const int port = test_port();
  for (int r = 0; r < s.world_size; ++r)
    ts.emplace_back([&, r] {
      RankOptions o;
      o.scenario = s;
      o.run_dir = dir;
      o.rank = r;
      o.world_size = s.world_size;
      o.master_port = port;
      o.threads = 1;
      o.resume = resume;
      o.run_t0 = 1.0;  // any fixed origin
      o.keep_params = keep_params;
      if (configure) configure(o);
      try {
        out[static_cast<size_t>(r)] = train_rank(o);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  if (errors_out) *errors_out = errors;
  else
    for (const auto& e : errors) EXPECT_EQ(e, "");
  return out;
}

// Step records of one rank with the wall-clock fields (t, step_ms, comm_ms) removed: the part of
// telemetry that must be identical for the same scenario and seed.
inline std::vector<std::string> deterministic_steps(const std::string& dir, int rank) {
  std::vector<std::string> out;
  for (Record r : read_jsonl(dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr)) {
    if (r.kind != RecordKind::step && r.kind != RecordKind::eval) continue;
    r.t = 0;
    r.step_ms.reset();
    r.comm_ms.reset();
    out.push_back(to_json(r));
  }
  return out;
}

}  // namespace flatline::test
