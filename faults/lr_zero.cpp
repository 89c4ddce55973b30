// lr_zero: the learning rate decays to (near) zero while steps go on (docs/DESIGN.md §2, cause 2).
// Modes:
//   schedule_total_too_short     the schedule's total is set so that lr reaches exactly 0 at the onset
//                                step (`at`) and stays there: a cosine sized for fewer steps than the run.
//   finished_schedule_on_resume  at the scenario's restart the scheduler state of a finished schedule
//                                (decayed to 0) is restored instead of the run's own.
//   scheduler_not_stepped        from `at`, the scheduler steps only on a micro-batch condition that never
//                                holds, so lr stays where it was (lr(0) = 0 in warmup).
#include <cmath>

#include <fmt/format.h>

#include "faults/fault.h"

namespace flatline {
namespace {

class LrZero : public Fault {
 public:
  LrZero(const FaultSpec& f, const Scenario& s) : Fault(f, s) {
    if (f.at <= 0) refuse("needs 'at' (a single onset step), not a range");
    if (f.mode == "schedule_total_too_short" && f.at - 1 <= s.schedule.warmup)
      refuse(fmt::format("'at' ({}) must come after warmup ({} steps)", f.at, s.schedule.warmup));
    if (f.mode == "schedule_total_too_short" && s.schedule.kind == "constant")
      refuse("a constant schedule has no total to size wrong; use cosine or linear");
    if (f.mode == "finished_schedule_on_resume" && (s.restart_at < 0 || s.restart_at < s.checkpoint_every))
      refuse("needs a 'restart: {at: N}' at or after the first checkpoint");
    if (f.mode == "scheduler_not_stepped" && (s.schedule.warmup == 0 || f.at != 1))
      refuse("needs a warmup and 'at: 1': the scheduler never steps, so lr stays at lr(0) = 0");
    if (f.target_rank >= 0) refuse("the schedule is shared by every rank: target must be 'all'");
  }

  void plan(TrainPlan& p) const override {
    if (spec_.mode != "schedule_total_too_short") return;
    p.schedule.spec.total = spec_.at - 1;  // lr(at - 1), used by logged step `at`, is min_lr
    p.schedule.spec.min_lr = 0;
  }

  void apply(Hook h, StepActions& a) const override {
    if (h == Hook::before_optimizer && spec_.mode == "scheduler_not_stepped") a.scheduler_frozen = true;
  }

  void resume(ResumeActions& r, int64_t) const override {
    if (spec_.mode == "finished_schedule_on_resume") r.finish_scheduler = true;
  }

  // active_from: first logged step whose lr differs from the healthy schedule's; onset: first step
  // whose lr is exactly 0 (after any warmup step with lr 0).
  FaultTruth truth() const override {
    FaultTruth t = Fault::truth();
    const LrSchedule healthy(scenario_.schedule, scenario_.optimizer.lr);
    if (spec_.mode == "schedule_total_too_short") {
      TrainPlan p{healthy};
      plan(p);
      t.active_from = t.onset_step = -1;
      for (int64_t s = 1; s <= scenario_.steps; ++s) {
        double a = p.schedule.lr(s - 1), b = healthy.lr(s - 1);
        if (t.active_from < 0 && a != b) t.active_from = s;
        if (t.onset_step < 0 && s > scenario_.schedule.warmup + 1 && a == 0) t.onset_step = s;
      }
    } else if (spec_.mode == "finished_schedule_on_resume") {
      t.active_from = t.onset_step = resume_checkpoint_step(scenario_) + 1;  // the first resumed step
      t.at_resume = true;
    } else {  // scheduler_not_stepped: lr stays at lr(at - 1) from step at + 1
      t.active_from = t.onset_step = spec_.at + 1;
    }
    return t;
  }
};

FLATLINE_REGISTER_FAULT(LrZero, "lr_zero", {
    {"schedule_total_too_short", "the schedule's total is `at`: lr reaches exactly 0 there and stays", {}},
    {"finished_schedule_on_resume", "at the restart a finished schedule's scheduler state is restored", {}},
    {"scheduler_not_stepped", "the scheduler never steps, so warmup stays at lr(0) = 0", {}},
});

}  // namespace
}  // namespace flatline
