// Record: one line of telemetry, the contract between training and detection (docs/DESIGN.md
// §3). A plain struct so that detectors, readers and the scorer never see torch.
// Every field a real log may lack is optional; detectors say which check could not run without it.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace flatline {

enum class RecordKind { step, heartbeat, event, eval };

const char* to_string(RecordKind k);

struct Record {
  RecordKind kind = RecordKind::step;
  int rank = 0;                                          // data-parallel rank that wrote it
  double t = std::numeric_limits<double>::quiet_NaN();   // seconds since run start (monotonic)
  int64_t step = 0;                                      // the trainer's logged global step

  // kind == step (one per optimizer step per rank)
  std::optional<int64_t> opt_step;          // optimizer updates actually applied so far
  std::optional<double> loss;               // this rank's training loss (mean over its micro-batches)
  std::optional<double> loss_avg;           // mean of loss over ranks
  std::optional<double> lr;                 // learning rate used by this update
  std::optional<double> grad_norm;          // global L2 norm after all-reduce, before clipping
  std::optional<double> local_grad_norm;    // this rank's L2 norm before all-reduce
  std::optional<double> grad_zero_frac;     // fraction of gradient elements exactly 0 (after all-reduce)
  std::optional<double> param_norm;         // L2 norm of all parameters after the update
  std::optional<double> update_norm;        // L2 norm of (params after - params before)
  std::optional<double> loss_scale;         // dynamic loss scale; 1 when not fp16
  std::optional<bool> overflow;             // inf/nan found in the (scaled) gradients
  std::optional<bool> skipped;              // optimizer step skipped (overflow)
  std::optional<uint64_t> batch_hash;       // 64-bit hash of the batch's sample ids (hex on disk)
  std::optional<int64_t> epoch;
  std::optional<int64_t> samples_seen;      // samples consumed by this rank so far
  std::optional<double> step_ms;            // wall time of the whole step
  std::optional<double> comm_ms;            // wall time inside the gradient all-reduce
  std::optional<int64_t> param_mismatches;  // steps so far after which parameters differed across ranks
                                            // (the run's own wrong-count, as nccl-tests' #wrong; must be 0)

  // kind == heartbeat: phase in {data, compute, collective, optimizer, checkpoint, eval}
  std::string phase;
  // kind == event: name in {checkpoint_save, checkpoint_load, eval_start, eval_end, resume, run_start, run_end,
  // error, stop_for_restart, interrupted, stopped (written by the launcher)}
  std::string name;
  std::string detail;                       // event detail (e.g. the error message)
  // kind == eval
  std::optional<double> eval_loss;
};

// Whether a rank's stream has ended with its own last word once `r` is read, given whether it had
// before (docs/DESIGN.md §3): an end event (run_end, stop_for_restart, error, interrupted, stopped) ends
// it; a step or a new process's start (run_start, resume, checkpoint_load) opens it again; anything
// else (the exiting process's stray heartbeat) leaves it as it was. The launcher and run_not_alive both
// read a stream so (inline: run_not_alive calls it for every record).
inline bool stream_ended_after(bool ended, const Record& r) {
  if (r.kind == RecordKind::step) return false;
  if (r.kind != RecordKind::event) return ended;
  const std::string& n = r.name;
  if (n == "run_end" || n == "stop_for_restart" || n == "error" || n == "interrupted" || n == "stopped") return true;
  if (n == "run_start" || n == "resume" || n == "checkpoint_load") return false;
  return ended;
}

}  // namespace flatline
