// One meaning for a fault's effect (docs/DESIGN.md §5 "Faults and their effects"). A scenario has two
// executors: the trainer (sim/trainer.cpp: real ranks, real tensors) and the fleet simulator
// (sim/simulate/walk.cpp: a modelled step for thousands of ranks). Everything about a step and a resume
// that follows from the scenario and its faults' StepActions is decided here, once, torch-free: the
// schedule after each fault's plan(), the loss scaler's set-up and its decision, the counters of an
// applied or skipped update, which batch a step trains, whether a rank contributes zeros, what the
// logger shows, when the run stops for its restart, what a resume restores, and when each fault's onset
// happened in run time. The executors differ only in how they carry an action out (zero a gradient
// buffer, or count the rank's contribution as zero), never in whether, when or on which step.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "faults/fault.h"
#include "run/loss_scaler.h"
#include "run/schedule.h"
#include "telemetry/record.h"

namespace flatline {

class Intervention;  // a confirmation's repair (faults/intervention.h)

// What a checkpoint restores besides the model, the optimizer and the sampler.
struct TrainCounters {
  int64_t step = 0;          // last completed global step
  int64_t sched_step = 0;    // scheduler steps taken: the next update's lr is schedule.lr(sched_step)
  int64_t opt_step = 0;      // optimizer updates applied (skipped fp16 steps do not count)
  int64_t samples_seen = 0;  // samples this rank consumed
  LossScaler scaler;
};

// What the logger shows: the step and loss of the last step it logged (a frozen logger keeps them).
struct LoggedStep {
  int64_t step = 0;
  double loss = 0;
};

// The optimizer step's decision, made after the overflow check.
struct UpdateDecision {
  bool skip = false;  // the optimizer step is skipped (GradScaler: inf/nan in the scaled gradients)
  double lr = 0;      // the lr of this update (the schedule at the counters' sched_step)
};

class RunPlan {
 public:
  // Builds the scenario's faults (ScenarioError for one it cannot host) and applies their plan().
  // `repair`: the intervention of a confirmation's repaired replay (faults/intervention.h, docs/DESIGN.md
  // §14), acting after the faults at every hook and at the start from a checkpoint; none otherwise.
  explicit RunPlan(const Scenario& s, std::shared_ptr<const Intervention> repair = nullptr);

  const Scenario& scenario() const { return scenario_; }
  const std::vector<std::unique_ptr<Fault>>& faults() const { return faults_; }
  const LrSchedule& schedule() const { return plan_.schedule; }

  // Before step 1: counters at zero, the loss scaler as the scenario configures it (GradScaler defaults,
  // PyTorch torch/amp/grad_scaler.py, unless `loss_scaler:` says otherwise; off without fp16).
  TrainCounters start() const;

  // The faults' actions at hook h (the trainer calls each hook where its step reaches it), then the
  // repair's, which has the last word; a.step and a.rank must be set.
  void apply(Hook h, StepActions& a) const;
  // Every hook in order, for an executor with nothing to do between them (the simulator).
  StepActions actions(int64_t step, int rank, int world_size) const;

  // The global batch (counted from the start of training) a fault makes this step train instead of the
  // sampler's next one; a replaced batch does not move the sampler.
  static std::optional<int64_t> replaced_batch(const StepActions& a) {
    return a.batch_index >= 0 ? std::optional<int64_t>(a.batch_index) : std::nullopt;
  }
  // The rank sends zeros into the gradient all-reduce (its buffer zeroed, or its backward skipped).
  static bool contributes_zeros(const StepActions& a) { return a.zero_grads || a.skip_backward; }

  // After the overflow check of a step: the scaler updates (and a fault's clamp applies, then a
  // repair's floor), the lr of the update is read (a repair's a.lr_hold where it collapsed), the optimizer
  // and scheduler counters advance (the scheduler steps on a skipped update too, as
  // torch.optim.lr_scheduler does after GradScaler.step; a frozen one never does).
  UpdateDecision update(TrainCounters& c, const StepActions& a, bool found_inf) const;
  // The same after a scaler that lives elsewhere (kernels: aten, the scaler on the device, sim/amp.h) has
  // decided `skip` itself: the lr read and the counters only.
  UpdateDecision count(TrainCounters& c, const StepActions& a, bool skip) const;

  // The logger's view after this step (a frozen logger keeps the step and loss it showed last), and the
  // cross-rank mean it prints (a frozen one prints its stale loss).
  static void log(LoggedStep& l, const StepActions& a, int64_t step, double loss) {
    if (!a.freeze_logging) l = {step, loss};
  }
  static double logged_loss_avg(const LoggedStep& l, const StepActions& a, double loss_avg) {
    return a.freeze_logging ? l.loss : loss_avg;
  }

  // A step record is written for this step (real loggers print every `log_every` steps).
  bool logs(int64_t step) const { return step % scenario_.log_every == 0; }

  // The run stops after this step for the scenario's restart (only in its first processes).
  bool stops_for_restart(int64_t step, bool resumed) const {
    return !resumed && scenario_.restart_at == step;
  }
  // At a resume from a checkpoint: the scenario's scaler settings over the checkpoint's scaler state,
  // then what the faults change about what is restored (a finished schedule's scheduler state), then
  // the repair's restart. Returns the faults' ResumeActions; the executor resets its sampler when
  // !restore_sampler.
  ResumeActions resume(TrainCounters& restored);
  // At a start from a checkpoint as the processes that wrote it going on (a replay of its later steps,
  // `flatline confirm`): the scenario's scaler settings over the checkpoint's state; when those
  // processes had themselves been resumed (`resumed`), what the faults changed about the plan at that
  // resume is made again (what they changed about the counters and the sampler is in the checkpoint
  // already); then the repair's restart.
  void carry_on(TrainCounters& restored, bool resumed);

  std::vector<FaultTruth> truths() const;

 private:
  Scenario scenario_;
  ResumeActions restore_plan(TrainCounters& restored, bool faults_resume);

  std::vector<std::unique_ptr<Fault>> faults_;
  TrainPlan plan_;
  std::shared_ptr<const Intervention> repair_;
};

// When each fault's onset happened, in run time, from a run's records as they are written (any
// interleaving of ranks; each rank's own order). The onset is on the fault's target rank (rank 0 for a
// fault on every rank): the t of the record of its onset step, or, for a fault whose onset step never
// completes as normal (FaultTruth::onset_at_start: a hang), the moment that step began on that rank,
// which is the t of its record of the step before. A step never logged as itself (a frozen logger) falls
// back to the step before. A fault that acts at the resume counts from the resumed processes only (their
// run of the step; the step before is the resume itself).
class OnsetClock {
 public:
  explicit OnsetClock(std::vector<FaultTruth> truths);
  void observe(const Record& r);
  // Run time of fault i's onset; NaN when the run never reached it.
  double onset_t(size_t i) const;
  size_t size() const { return truths_.size(); }

 private:
  struct State {
    bool resumed = false;
    double at = std::numeric_limits<double>::quiet_NaN(), before = std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<FaultTruth> truths_;
  std::vector<State> state_;
};

}  // namespace flatline
