// The launcher behind `flatline run` and `flatline score` (no torch): starts world_size local rank
// processes (this same binary, `flatline worker`, with torchrun's RANK / WORLD_SIZE / MASTER_ADDR /
// MASTER_PORT variables), restarts them from the checkpoint when the scenario says so, tails their
// telemetry into the detectors while they train (live diagnosis), and writes the run's manifest.
// A rank that fails makes the launcher stop the others after the collective timeout plus a grace
// period, so a run always ends in bounded time.
#pragma once
#include <functional>
#include <string>

#include "detectors/external.h"
#include "detectors/triage.h"
#include "faults/scenario.h"
#include "telemetry/manifest.h"

namespace flatline {

struct LaunchOptions {
  std::string run_dir;             // created (emptied if it exists)
  std::string self_exe;            // path of the flatline binary
  bool live_print = true;          // print findings as the detectors fire
  int threads_per_rank = 0;        // 0: cores / world_size
  std::string device, process_group;  // given to run / score: passed on to every rank ("" = the scenario's)
  // External detectors fed the run's records live from the poll loop (detectors/external.h), never
  // from the ranks' path; their stderr goes to run_dir/detectors/<name>.stderr.
  std::vector<ExternalDetectorSpec> detectors;
  FeedLimits detector_limits;
  std::vector<std::pair<std::string, std::string>> detector_env;  // e.g. the formats' paths
  std::vector<std::string> formats;  // foreign-format logs rank 0 also writes (`worker --formats`)
};

struct LaunchResult {
  Manifest manifest;
  Diagnosis diagnosis;
  std::string first_error;         // first rank error, "" if none
  std::vector<ExternalOutcome> detector_outcomes;  // one per LaunchOptions::detectors
};

// `yaml_text` is the scenario as written (copied into run_dir/scenario.yaml for the ranks).
LaunchResult launch_run(const Scenario& s, const std::string& yaml_text, const LaunchOptions& o);

}  // namespace flatline
