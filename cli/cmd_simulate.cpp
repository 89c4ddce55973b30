// `flatline simulate SCENARIO --ranks N --steps S [--out DIR] [--seed K] [--step-ms MS]`: the fleet
// simulator (sim/simulate): telemetry for N ranks without training, streamed into the detectors as it
// is produced; with --out also written as a run directory (telemetry/rank-<r>.jsonl, manifest.json,
// scenario.yaml, diagnosis.json) that `flatline diagnose` and `flatline score` read.
// Exit status: 0 when the scenario's `expect` is met, 1 otherwise, 2 for a bad scenario.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "cli/run_dir.h"
#include "core/atomic_file.h"
#include "scoring/score.h"
#include "faults/scenario_file.h"
#include "sim/simulate/sinks.h"
#include "sim/simulate/simulator.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string scenario, out;
  int ranks = 0;
  int64_t steps = 0;
  int64_t seed = -1;
  double step_ms = 0;
};

int run(const Args& a) {
  SimOptions o;
  o.ranks = a.ranks;
  o.steps = a.steps;
  o.step_ms = a.step_ms;
  if (a.seed >= 0) o.override_seed = true, o.seed = static_cast<uint64_t>(a.seed);
  const Scenario s = resolve_for_simulation(load_scenario_text(read_text_file(a.scenario), a.scenario), o);
  std::cout << fmt::format("flatline simulate {}: {} ranks, {} steps (no training)\n", s.name, s.world_size, s.steps)
            << std::flush;
  DetectorConfig cfg;
  cfg.world_size = s.world_size;
  Triage tri(cfg);
  tri.on_finding([](const Finding& f) {
    std::cout << fmt::format("  finding: {}{} at step {} (onset {})\n", f.cause,
                             f.rank >= 0 ? fmt::format(" on rank {}", f.rank) : "", f.detected_step, f.onset_step)
              << std::flush;
  });
  TriageSink triage_sink(tri);
  const auto t0 = std::chrono::steady_clock::now();
  SimResult r;
  std::string run_dir;
  RunDirLock lock;
  if (!a.out.empty()) {
    run_dir = a.out + "/" + s.name;
    lock = claim_run_dir(run_dir);  // never a directory that is not a run's, never one in use (cli/run_dir.h)
    write_file_atomic(run_dir + "/scenario.yaml", to_yaml(s), "the scenario");
    JsonlDirSink files(run_dir + "/telemetry");
    TeeSink both(triage_sink, files);
    r = simulate(s, o, both);
  } else {
    r = simulate(s, o, triage_sink);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Diagnosis d = tri.diagnosis();
  const Manifest m = simulation_manifest(s, r, wall);
  std::cout << to_text(d);
  RunScore sc = score_run(m, d);
  std::cout << fmt::format("\n{} records ({} heartbeats) in {:.2f} s: {:.2f} M records/s; simulated {:.0f} s\n",
                           r.records, r.heartbeats, wall, r.records / wall / 1e6, r.t_end);
  if (!run_dir.empty()) {
    write_manifest(m, run_dir + "/manifest.json");
    write_file_atomic(run_dir + "/diagnosis.json", to_json(d) + "\n", "the diagnosis");
    std::cout << "run directory: " << run_dir << "\n";
  }
  std::cout << fmt::format("ground truth: {}{}; verdict: {}", sc.truth_cause,
                           sc.truth_rank >= 0 ? fmt::format(" (rank {})", sc.truth_rank) : "",
                           sc.correct ? "correct" : (sc.false_alarm ? "FALSE ALARM" : "MISSED"));
  if (sc.latency_steps) std::cout << fmt::format(", latency {} step(s)", *sc.latency_steps);
  std::cout << "\n";
  if (r.failed) std::cout << "run ended with an error: " << r.error << "\n";
  return sc.expect_met ? 0 : 1;
}

FLATLINE_COMMAND("simulate", "fleet-scale telemetry without training, diagnosed as it streams", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenario", a->scenario, "scenario YAML file")->required();
  sub.add_option("--ranks", a->ranks, "simulated ranks (default: the scenario's world_size)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--steps", a->steps, "steps (default: the scenario's)")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--out", a->out, "also write a run directory under DIR (JSONL per rank + manifest)");
  sub.add_option("--seed", a->seed, "seed (default: the scenario's)");
  sub.add_option("--step-ms", a->step_ms, "median compute ms per step (default 300)")
      ->check(CLI::Range(1e-3, kMaxSimStepMs));
  return [a] { return run(*a); };
});

}  // namespace
}  // namespace flatline::cli
