// The training harness of one data-parallel rank (torch-free interface; the loop is in trainer.cpp, the
// step in sim/step_flatline.cpp and sim/step_aten.cpp behind sim/step.h, checkpoints in sim/checkpoint.cpp).
// train_rank() trains the scenario's model on its data from step 1 (or from the latest checkpoint when
// resuming) to `steps`, or to the scenario's restart point, writing telemetry/rank-<r>.jsonl in the run
// directory: a step record per optimizer step, heartbeats from a watchdog thread, events, eval records.
// Errors, two tiers (docs/DESIGN.md §9): a recoverable failure of the rank — a collective that fails or
// times out (a peer died or hung), the file system (a telemetry or data file), a checkpoint that cannot
// be written or read — writes an `error` event and throws RankError of that kind. Anything else is a bug
// and leaves as itself after the same `error` event ("internal error: ..."): InvariantError from a
// FLATLINE_CHECK (core/check.h), or any other exception (std::logic_error from a broken precondition).
// A scenario that asks more of its data than the data holds leaves as a ScenarioError. Either way every
// completed step's record is on disk by then (records are written and flushed, one line each, by a background thread within
// microseconds of the step; train_rank drains it before it returns or throws).
// `device: cuda` with fewer GPUs than local ranks throws RankError naming both counts (unless
// `process_group: gloo`, which lets ranks share GPUs).
// With `kernels: aten` (CUDA's default) the step never waits for the device except where
// torch.amp.GradScaler.step does (the overflow check, fp16 only): a step's telemetry scalars are
// gathered on the device into one tensor, copied to pinned host memory, and its record is written
// at the next step (or before a checkpoint, an eval, the end, or an error).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/protocol.h"
#include "run/scenario.h"
#include "sim/errors.h"  // RankError

namespace flatline {

class Intervention;  // faults/intervention.h

struct RankOptions {
  Scenario scenario;
  std::string run_dir;             // telemetry/ and checkpoints/ go here
  int rank = 0, world_size = 1, local_world_size = 1;
  int local_rank = -1;             // LOCAL_RANK: device: cuda trains on cuda:local_rank; -1: rank % local_world_size
  std::string master_addr = kDefaultMasterAddr;
  int master_port = kDefaultMasterPort;
  bool resume = false;             // continue from the latest checkpoint in run_dir
  // A replay (`flatline confirm`, docs/DESIGN.md §14). carry_on: start from the latest checkpoint in
  // run_dir as the processes that wrote it going on (not a resume: the faults' resume actions are not
  // taken again, and processes that were not resumed still stop for the scenario's restart).
  bool carry_on = false;
  int64_t stop_after = -1;         // train no further than this step; -1: the scenario's steps
  bool checkpoint_at_stop = false; // write a checkpoint after the last step trained (a branch point)
  int64_t eval_from = -1;          // also evaluate the held-out loss after every step from this one
  std::shared_ptr<const Intervention> repair;  // the repaired replay's intervention, after the faults
  int threads = 0;                 // intra-op threads; 0: hardware cores / local ranks (at least 1)
  double run_t0 = 0;               // wall-clock seconds of the run's start; 0: rank 0's start, shared
  bool keep_params = false;        // return the final parameters (tests)
  // false: the step without telemetry, to measure what telemetry costs (bench/bench_torch_step.cpp):
  // no step records, no heartbeat thread, no loss read-back, no zero count or norms beyond what
  // training needs (the clip's grad norm; the overflow check under fp16; the cross-rank checksum).
  // Events are still written.
  bool telemetry = true;
  // The launcher's requests for a checkpoint this rank has seen by the end of `step` (docs/DESIGN.md §8,
  // "A checkpoint near each finding"); unset: those core/checkpoint_request.h counted since train_rank
  // began. A test gives its own.
  std::function<int64_t(int64_t step)> checkpoint_requests;
};

struct RankResult {
  int64_t last_step = 0;           // last step completed
  int64_t opt_steps = 0;           // optimizer updates applied
  int64_t param_mismatches = 0;    // steps after which parameters differed across ranks (must be 0; also in
                                   // every step record, as nccl-tests' #wrong)
  bool stopped_for_restart = false;
  std::vector<float> params;       // flattened parameters, when keep_params
  std::vector<double> losses;      // this rank's loss per step (0 without telemetry on one rank)
  std::vector<double> step_ms;     // wall time of each step, data to the record written (ms)
};

RankResult train_rank(const RankOptions& o);

// Step time of the scenario's model on one rank (ms per optimizer step, median of `steps` after one
// warm-up step): train_rank with telemetry off, no faults, checkpoints or eval, no collectives (its
// precision and grad_accum apply). The number the notes and benchmarks report.
double measure_step_ms(const Scenario& s, int steps, int threads);

}  // namespace flatline
