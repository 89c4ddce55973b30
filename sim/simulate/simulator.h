// Fleet simulator: telemetry for N data-parallel ranks without training (docs/DESIGN.md §11). It walks the
// scenario's steps the way sim/trainer.cpp does, with the SAME fault definitions (make_faults, plan,
// apply_all at every Hook, resume), the same LR schedule (run/schedule.h, after each fault's plan())
// and the same dynamic loss scaler (run/loss_scaler.h), but replaces the model by a loss curve and
// the clock by simulated time, so 1024 ranks x 100k steps take seconds. Plain C++, no torch.
//
// Model of one step (all times in simulated seconds / ms; constants in simulator.cpp, with sources):
//   loss      L(p) = floor + A (1 + p / tau)^-alpha (a power law to a floor, as in Kaplan et al. 2020),
//             p = progress: + lr/peak x (contributing ranks / W) x (1 - underflowed fraction) per applied
//             update on fresh data; nothing when lr = 0, the step is skipped, or the batch is replayed
//             (a replayed batch is slightly memorised: its loss dips). Per rank: L (1 + 3% seeded noise).
//   grads     global norm g(p) decays with progress; each rank's local norm is g x (1 + noise) x 1.4;
//             a rank that zeroes or skips its backward has local 0, the all-reduced norm x (W - 1) / W.
//   fp16      overflow when an activation emits inf (the fault) or scale x g x 64 > 65504 (the largest
//             element is ~64x the norm); the fraction of gradient elements that underflow comes from a
//             log-normal element distribution around scale x g / 1000.
//   time      each rank computes base x (1 + 2% jitter) x (1 + slowdown); the all-reduce starts when
//             the slowest rank arrives: step_ms = max compute + comm + optimizer on every rank, comm_ms =
//             the wait for the slowest + the transfer. A block_s >= the collective timeout is a hang:
//             the others wait in `collective`, heartbeats go on, an `error` event ends the run.
//   data      DistributedSampler's layout (run/sampler.h: global batch = W x batch x accum, rank r's
//             contiguous slice, drop_last, epochs) over a simulated dataset of 2^k samples (about 1000
//             steps per epoch); the per-epoch permutation is a keyed affine bijection computed per id
//             (a materialised shuffle would cost O(dataset) memory and time); batch_hash of the ids.
// Streaming: records go to a RecordSink one at a time (a Triage, JSONL files, a counter); nothing is
// retained, so memory is O(ranks) and time O(ranks x steps).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "faults/fault.h"
#include "telemetry/record.h"

namespace flatline {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void write(const Record& r) = 0;
  // The simulator hands its records over in blocks that it builds in place (no copy per record); the
  // records are valid during the call only. Default: one write() each.
  virtual void write_block(const Record* records, size_t n) {
    for (size_t i = 0; i < n; ++i) write(records[i]);
  }
  virtual void end(double /*t_end*/) {}  // the run ended at simulated time t_end
};

struct SimOptions {
  int ranks = 0;           // 0: the scenario's world_size
  int64_t steps = 0;       // 0: the scenario's steps
  bool override_seed = false;
  uint64_t seed = 0;
  double step_ms = 0;      // median compute ms per step, at most kMaxSimStepMs; 0: the default (model.h)
};
// One hour a step: beyond it the heartbeats of one step alone outnumber a run's records.
constexpr double kMaxSimStepMs = 3600.0 * 1000;

struct SimResult {
  int64_t records = 0, step_records = 0, heartbeats = 0;
  int64_t last_step = 0;
  double t_end = 0;                 // simulated seconds
  bool failed = false;              // ended by an error (a hang's collective timeout)
  std::string error;
  std::vector<FaultTruth> truths;   // one per fault (manifest ground truth)
  std::vector<double> onset_t;      // simulated t of each fault's onset step on its target (NaN if not reached)
};

// The scenario with the options applied (world_size, steps, seed). Throws ScenarioError where the
// result means nothing: a fault's target rank or the expected rank outside the ranks, a fault that
// starts after the last step, a step time outside (0, kMaxSimStepMs].
Scenario resolve_for_simulation(Scenario s, const SimOptions& o);

// Simulates the (resolved) scenario into `sink`. Throws ScenarioError for faults the scenario cannot
// host (as make_faults does).
SimResult simulate(const Scenario& s, const SimOptions& o, RecordSink& sink);

}  // namespace flatline
