// Fixture runs for the drill and report tests: small synthetic run directories (telemetry/rank-<r>.jsonl
// + manifest.json, as `flatline run` writes them) generated from the seeded stream generator of the
// detector tests, so that no test trains a model. Each fixture carries its fault in the manifest.
#pragma once
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "telemetry/jsonl.h"
#include "telemetry/manifest.h"
#include "tests/detectors/stream.h"

namespace flatline::testing {

inline std::string scratch_dir(const std::string& tag) {
  auto d = std::filesystem::temp_directory_path() /
           ("flatline-" + tag + "-" + std::to_string(std::random_device{}() % 1000000000));
  std::filesystem::create_directories(d);
  return d.string();
}

// Writes parent/dir_name as a run directory; `fault` with an empty kind means a healthy run.
inline std::string write_run(const std::string& parent, const std::string& dir_name, const std::string& scenario,
                             const Spec& sp, FaultTruth fault = {}) {
  const std::string dir = parent + "/" + dir_name;
  std::filesystem::create_directories(dir + "/telemetry");
  const auto ranks = generate(sp);
  for (size_t r = 0; r < ranks.size(); ++r) {
    JsonlWriter w(dir + "/telemetry/rank-" + std::to_string(r) + ".jsonl");
    for (const auto& rec : ranks[r]) {
      w.write(rec);
      if (rec.kind == RecordKind::step && r == 0 && rec.step == fault.onset_step) fault.onset_t = rec.t;
    }
  }
  Manifest m;
  m.scenario = scenario;
  m.seed = sp.seed;
  m.world_size = sp.world;
  m.steps = sp.steps;
  m.status = "completed";
  m.wall_s = 42;
  if (!fault.kind.empty()) {
    m.faults.push_back(fault);
    m.expect_cause = fault.kind;
    m.expect_rank = fault.rank;
  }
  write_manifest(m, dir + "/manifest.json");
  return dir;
}

inline FaultTruth fault(const std::string& kind, const std::string& mode, int rank, int64_t at) {
  FaultTruth f;
  f.kind = kind, f.mode = mode, f.rank = rank, f.active_from = at, f.onset_step = at;
  return f;
}

// Four runs of 200 steps on 2 ranks, in a suite directory (sorted: a-lr-zero, b-zero-grad-rank,
// c-data-replay, d-healthy). The lr run also has eval records; the healthy run's name needs escaping.
inline std::string write_fixture_suite(const std::string& parent) {
  Spec base;
  base.steps = 200;
  base.seed = 11;
  Spec lr = base;
  lr.eval_at = {50, 100, 150};
  lr.lr = [](int64_t step, bool, double healthy) { return step >= 121 ? 0.0 : healthy; };
  write_run(parent, "a-lr-zero", "lr-zero-fixture", lr, fault("lr_zero", "schedule_total_too_short", -1, 121));
  Spec zg = base;
  zg.local_grad_scale = [](int64_t step, int rank) { return rank == 1 && step >= 101 ? 0.0 : 1.0; };
  write_run(parent, "b-zero-grad-rank", "zero-grad-rank-fixture", zg,
            fault("zero_grad_rank", "zeroed_buffer", 1, 101));
  Spec dr = base;
  dr.batch_index = [](int64_t step, bool) { return step >= 121 ? 100 + (step - 121) % 8 : step - 1; };
  write_run(parent, "c-data-replay", "data-replay-fixture", dr, fault("data_replay", "cycle_window", -1, 121));
  write_run(parent, "d-healthy", "healthy <fixture> & \"friends\"", base);
  return parent;
}

}  // namespace flatline::testing
