// One optimizer step of one data-parallel rank, once its batch is chosen, behind one interface with two
// kernel paths (torch; only sim/ includes this; docs/DESIGN.md §7), as llm.c keeps its CPU and CUDA
// trainers apart:
//  - sim/step_flatline.cpp, `kernels: flatline` (CPU only, its default): the harness's own kernels
//    (sim/gelu.h, the binary16 emulation of sim/fp16.h, the fused optimizer of sim/optimizer.h) and the
//    loss scaler on the host (run/loss_scaler.h); a step's record is complete when the step ends.
//  - sim/step_aten.cpp, `kernels: aten` (CUDA's default; runs on CPU too): ATen's kernels, real autocast
//    and GradScaler (sim/amp.h), every gradient a view into one flat buffer. The step never waits for the
//    device except where torch.amp.GradScaler.step does (the overflow check, fp16 only): its telemetry
//    scalars are gathered on the device into one tensor, copied to pinned host memory, and its record is
//    completed at the next step's record, or at a flush (before an eval, a checkpoint, the end, an error).
// The trainer (sim/trainer.cpp) calls the phases in this order, the fault hook points (faults/effects.h)
// and the watchdog's phases between them:
//   forward_backward, [straggler: wait_for_device], [after_backward], finish_local, [at_allreduce],
//   all_reduce, [before_optimizer], optimizer_step, check_consistency, [at_logging], record.
// A path decides nothing about a fault (whether, when, on which step: RunPlan does); it carries out the
// StepActions it is handed. Both paths give the same telemetry to float rounding
// (tests/sim/trainer_aten_test.cpp); each is bit-identical run to run on CPU.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "faults/effects.h"
#include "sim/batches.h"
#include "sim/dist.h"
#include "sim/models.h"
#include "sim/optimizer.h"
#include "sim/watchdog.h"
#include "telemetry/record.h"

namespace flatline {

// A step's telemetry scalars, host values in this order (kernels: aten gathers them on the device into
// one float64 tensor of this layout, for one copy back).
// kCheckpointRequests: the launcher's checkpoint requests any rank had seen at this step (the most).
enum Scalar { kLoss, kLossAvg, kLocalGradNorm, kGradNorm, kZeros, kFoundInf, kUpdateSq, kParamSq, kMismatch,
              kScaleUsed, kCheckpointRequests, kScalars };

// A step's record before its scalars are known: what the trainer fills in (step counters, lr, batch,
// comm_ms) and what completing it needs.
struct PendingRecord {
  Record r;
  StepActions act;      // the step's fault actions (a frozen logger repeats its last step and loss)
  bool log = false;     // this step writes a record (log_every, telemetry on)
  int64_t numel = 0;    // gradient elements (the zero fraction's denominator); set by the path
  std::chrono::steady_clock::time_point t_step;  // when the step began: r.step_ms is measured from it
};

// Where a step's record goes once its scalars are on the host (sim/trainer.cpp).
class StepRecorder {
 public:
  // The logger's view (RunPlan::log), the rank's loss series and mismatch count, then the record
  // written when p.log.
  virtual void complete(PendingRecord& p, const double* scalars) = 0;
  // A step whose scalars are never read back (one rank, telemetry off): a loss of 0 in the series.
  virtual void uncounted() = 0;

 protected:
  ~StepRecorder() = default;
};

// What a step works on, set up by the trainer; the references outlive the path.
struct StepContext {
  const Scenario& sc;
  const RunPlan& plan;           // the update's decision (RunPlan::update, RunPlan::count)
  Comm& comm;                    // the process group; comm.device() is where the step runs
  TrainModel& model;
  std::vector<at::Tensor> params;
  TrainCounters& counters;       // advanced by each update; the flatline path's loss scaler lives here
  StepRecorder& recorder;
  const Clock& clock;            // the run's: a record's t is when it is written
  bool telemetry = true;         // false: only what training needs (RankOptions::telemetry)
};

class StepPath {
 public:
  virtual ~StepPath() = default;
  virtual Optimizer& optimizer() = 0;
  // After the start or the restore, before the first step: the loss scaler's state (aten: onto the
  // device). The scaler's state for a checkpoint (aten: read back from the device).
  virtual void start(const LossScaler& scaler) = 0;
  virtual LossScaler scaler_state() const = 0;

  // ---- forward + backward -------------------------------------------------------------------------
  // The gradients of the batch's grad_accum micro-batches (ids: batch_size x grad_accum sample ids),
  // of the loss times the loss scale / grad_accum; no backward when act.skip_backward (zeros then).
  virtual void forward_backward(const TrainData& data, const std::vector<int64_t>& ids, const StepActions& act) = 0;
  // Returns once the device has done the step so far (a straggler's delay is in proportion to it).
  virtual void wait_for_device() = 0;
  // This rank's own gradient is final: zeroed when the rank sends zeros; its statistics taken (the
  // local grad norm, zero_grad_rank's signal).
  virtual void finish_local(bool send_zeros) = 0;
  // ---- all-reduce: the mean of the gradients and of the loss over ranks --------------------------
  virtual void all_reduce() = 0;
  // ---- optimizer: the overflow check, the decision (RunPlan), unscale + clip, the update ----------
  virtual UpdateDecision optimizer_step(const StepActions& act) = 0;
  // ---- consistency: the parameters' checksum compared across ranks (nccl-tests' #wrong) -----------
  // In the same all-reduce (a max), the launcher's checkpoint requests this rank has seen, `requests`:
  // the scalar kCheckpointRequests is the most any rank has seen, the same on every rank.
  virtual void check_consistency(int64_t requests) = 0;
  // ---- record: p completed with the step's scalars, now (flatline) or once they arrive (aten) ------
  virtual void record(PendingRecord p) = 0;
  // Completes a pending record, waiting for its scalars; `arrived_only`: only if they are on the host
  // already (the error path must not wait on a failed device or peer).
  virtual void flush(bool arrived_only = false) = 0;

  // The loss of a held-out batch (the eval's forward, under the caller's NoGradGuard).
  virtual at::Tensor eval_loss(const at::Tensor& x, const at::Tensor& y) = 0;
};

std::unique_ptr<StepPath> make_flatline_step(const StepContext& c);  // sim/step_flatline.cpp
std::unique_ptr<StepPath> make_aten_step(const StepContext& c);      // sim/step_aten.cpp

}  // namespace flatline
