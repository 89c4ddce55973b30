// The launcher behind `flatline run` and `flatline score` (no torch; docs/DESIGN.md §8): starts
// world_size local rank processes (this same binary, `flatline worker`, with torchrun's RANK /
// WORLD_SIZE / MASTER_ADDR / MASTER_PORT variables), restarts them from the checkpoint when the scenario
// says so, tails their telemetry into the detectors while they train (live diagnosis), and writes the
// run's manifest. It ends every run in bounded time, whatever its ranks do:
//   - a rank that fails: the others are killed collective_timeout_s + kKillGraceS later;
//   - no record from any rank for stall_bound_s (core/protocol.h; a paused host, SIGSTOP, a frozen
//     file system): the run is diagnosed run_not_alive on the launcher's clock and every rank killed;
//   - SIGTERM, SIGINT or SIGHUP to the launcher: forwarded to every rank, which flushes and exits;
//     whoever is left after kInterruptGraceS is killed; a second signal kills at once. The manifest
//     says "interrupted", and `run` / `score` exit 128 + the signal;
//   - the launcher's own death: every rank gets kParentDeathSignal and leaves the same way.
// A rank that ended without writing its own last event (killed, died) gets a `stopped` event appended
// to its telemetry saying why and when, so `flatline diagnose` later judges liveness against the time
// the run ended. Each rank's stdout and stderr go through a pipe to logs/rank-<r>.log: the launcher
// keeps their tail in memory, so its error line quotes the rank even when the disk is full.
#pragma once
#include <string>
#include <vector>

#include "external/feed.h"
#include "detectors/triage.h"
#include "run/scenario.h"
#include "telemetry/manifest.h"

namespace flatline {

class Progress;

struct LaunchOptions {
  std::string run_dir;             // claimed (cli/run_dir.h): locked, emptied if it is an old run directory
  std::string self_exe;            // path of the flatline binary
  bool live_print = true;          // print findings as the detectors fire
  int threads_per_rank = 0;        // 0: cores / world_size
  bool oversubscribe = false;      // lift the guard's per-core bound (cli/local_guard.h)
  Progress* progress = nullptr;    // `flatline run`'s progress line (cli/progress.h); live findings print through it
  // Each rank runs under this command: split on spaces, "{rank}" replaced by the rank. numactl, a
  // profiler, or `ip netns exec host{rank}` for ranks on separate network hosts (then master_addr is
  // rank 0's address there). Empty: none.
  std::string rank_wrapper;
  std::string master_addr;         // MASTER_ADDR for the ranks; empty: kDefaultMasterAddr (loopback)
  std::string device, process_group;  // given to run / score: passed on to every rank ("" = the scenario's)
  // External detectors fed the run's records live from the poll loop (external/feed.h), never
  // from the ranks' path; their stderr goes to run_dir/detectors/<name>.stderr.
  std::vector<ExternalDetectorSpec> detectors;
  FeedLimits detector_limits;
  std::vector<std::pair<std::string, std::string>> detector_env;  // e.g. the formats' paths
  std::vector<std::string> formats;  // foreign-format logs rank 0 also writes (`worker --formats`)
  // A replay (`flatline confirm`, docs/DESIGN.md §14): the caller prepared run_dir (the checkpoint it
  // starts from, in checkpoints/), so it is not emptied; no manifest is written (a replay has no ground
  // truth); the ranks' first start is `start` and every start gets `worker_args`.
  bool replay = false;
  enum class Start { fresh, resume, carry_on } start = Start::fresh;
  std::vector<std::string> worker_args;
};

struct LaunchResult {
  Manifest manifest;
  Diagnosis diagnosis;
  std::string first_error;         // why the run failed or was stopped, "" if it completed
  int interrupted_by = 0;          // the signal that interrupted the run, 0 if none
  bool stalled = false;            // the progress watchdog ended it
  std::vector<std::string> write_errors;  // outputs of the run that could not be written (manifest, diagnosis)
  std::vector<ExternalOutcome> detector_outcomes;  // one per LaunchOptions::detectors
};

// `yaml_text` is the scenario as written (copied into run_dir/scenario.yaml for the ranks). Throws
// ScenarioError when the scenario cannot run here (fleet-only, beyond the local world-size guard), and
// std::runtime_error when the run directory cannot be claimed or written at the start.
LaunchResult launch_run(const Scenario& s, const std::string& yaml_text, const LaunchOptions& o);

// The launcher's handlers for SIGTERM, SIGINT and SIGHUP (idempotent; launch_run installs them too): a
// signal then stops the current run as above, and between runs launcher_interrupt() reports it.
void install_launcher_signals();
int launcher_interrupt();  // the first signal received since install, 0 if none

}  // namespace flatline
