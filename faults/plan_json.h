// A scenario's plan for an executor outside this process (docs/DESIGN.md §16): the Python probe
// (python/flatline_probe) carries the faults out in the user's own training, and reads what to do from
// here, so that what a fault does, when and on which rank is decided once, by RunPlan (faults/effects.h).
//
// JSON, one object (`flatline plan SCENARIO` prints it; the launcher writes <run dir>/plan.json):
//   {"format": "flatline-plan/1", "name", "seed", "world_size", "steps", "log_every", "heartbeat_s",
//    "collective_timeout_s", "precision", "device",
//    "actions": [{"rank": r, "from": s0, "to": s1, <fields>}, ...],
//    "lr_factor": [[step, factor], ...],
//    "checkpoint_every", "restart_at",                       (0 and -1: none)
//    "resume": {"from_step", "restore_sampler", "finish_scheduler"}}   (with a restart only)
// `actions`: StepActions (faults/fault.h) after every hook, for the steps s0..s1 (inclusive, 1-based
// global steps) of rank r on which they differ from a healthy step, consecutive equal steps merged; the
// fields, present only when set: zero_grads, skip_backward, freeze_logging, inject_inf, scheduler_frozen
// (booleans), block_s, data_block_s, slowdown (seconds, fraction), max_loss_scale, batch_index (the
// global batch, counted from 0, the step trains instead of its own: step s trains batch s - 1).
// `lr_factor`: the planned schedule's lr over the healthy one's for each step where they differ (the
// lr of step s is the schedule at s - 1; 0 where the planned one is 0): the probe multiplies the job's
// own lr by it, so a schedule sized too short reaches 0 where the harness's does.
// `checkpoint_every`: the probe asks the job for a checkpoint after each multiple of it; `restart_at`:
// the probe stops the job after that step (stop_for_restart, exit status 3) and flatline starts it again
// to resume. `resume`: what the restarted job resumes from (`from_step`, the last checkpoint at or
// before the restart: resume_checkpoint_step) and what the faults change about it (ResumeActions:
// restore_sampler false, the loader starts its epoch over; finish_scheduler, the scheduler of a finished
// schedule is restored: the lr is 0 from then on).
// Throws ScenarioError for a scenario whose faults cannot be planned (RunPlan's checks).
#pragma once
#include <string>

#include "run/scenario.h"

namespace flatline {

inline constexpr const char* kPlanFormat = "flatline-plan/1";

std::string plan_json(const Scenario& s);

}  // namespace flatline
