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
  // kind == event: one of the names below (namespace event)
  std::string name;
  std::string detail;                       // event detail (e.g. the error message)
  // kind == eval
  std::optional<double> eval_loss;
};

// The names of `event` records (docs/DESIGN.md §3), one constant each: whoever writes or reads an event
// names it through these.
namespace event {
constexpr const char* run_start = "run_start";              // a process starts training from step 0
constexpr const char* run_end = "run_end";                  // it trained to its last step
constexpr const char* checkpoint_save = "checkpoint_save";
constexpr const char* checkpoint_load = "checkpoint_load";  // detail: the checkpoint's directory
constexpr const char* eval_start = "eval_start";
constexpr const char* eval_end = "eval_end";
constexpr const char* stop_for_restart = "stop_for_restart";  // it stops at the scenario's restart
constexpr const char* resume = "resume";                    // a new process goes on from a checkpoint
constexpr const char* error = "error";                      // detail: the message
constexpr const char* interrupted = "interrupted";          // a signal, or the launcher's death: its last record
constexpr const char* stopped = "stopped";                  // written by the launcher: the rank ended without its own
}  // namespace event

// Whether a rank's stream has ended with its own last word once `r` is read, given whether it had
// before (docs/DESIGN.md §3): an end event (run_end, stop_for_restart, error, interrupted, stopped) ends
// it; a step or a new process's start (run_start, resume, checkpoint_load) opens it again; anything
// else (the exiting process's stray heartbeat) leaves it as it was. The launcher and run_not_alive both
// read a stream so (inline: run_not_alive calls it for every record).
inline bool stream_ended_after(bool ended, const Record& r) {
  if (r.kind == RecordKind::step) return false;
  if (r.kind != RecordKind::event) return ended;
  const std::string& n = r.name;
  if (n == event::run_end || n == event::stop_for_restart || n == event::error || n == event::interrupted ||
      n == event::stopped)
    return true;
  if (n == event::run_start || n == event::resume || n == event::checkpoint_load) return false;
  return ended;
}

}  // namespace flatline
