// RunPlan and OnsetClock (faults/effects.h).
#include "faults/effects.h"

#include <cmath>

#include "faults/intervention.h"

namespace flatline {

RunPlan::RunPlan(const Scenario& s, std::shared_ptr<const Intervention> repair)
    : scenario_(s), faults_(make_faults(s)), plan_{LrSchedule(s.schedule, s.optimizer.lr)}, repair_(std::move(repair)) {
  for (const auto& f : faults_) f->plan(plan_);
}

void RunPlan::apply(Hook h, StepActions& a) const {
  apply_all(faults_, h, a);
  if (repair_) repair_->apply(h, a);
}

TrainCounters RunPlan::start() const {
  TrainCounters c;
  c.scaler.enabled = scenario_.precision == "fp16";
  c.scaler.scale = c.scaler.enabled ? scenario_.loss_scale_init : 1.0;
  c.scaler.growth_interval = scenario_.loss_scale_growth_interval;
  return c;
}

StepActions RunPlan::actions(int64_t step, int rank, int world_size) const {
  static constexpr Hook kHooks[] = {Hook::before_forward, Hook::after_backward, Hook::at_allreduce,
                                    Hook::before_optimizer, Hook::at_logging};
  StepActions a;
  a.step = step;
  a.rank = rank;
  a.world_size = world_size;
  for (Hook h : kHooks) apply(h, a);
  return a;
}

UpdateDecision RunPlan::update(TrainCounters& c, const StepActions& a, bool found_inf) const {
  return count(c, a, c.scaler.update(found_inf, a.max_loss_scale, a.min_loss_scale));
}

UpdateDecision RunPlan::count(TrainCounters& c, const StepActions& a, bool skip) const {
  UpdateDecision d;
  d.skip = skip;
  d.lr = plan_.schedule.lr(c.sched_step);
  if (d.lr < a.lr_hold_below) d.lr = a.lr_hold;
  if (!d.skip) ++c.opt_step;
  if (!a.scheduler_frozen) ++c.sched_step;
  return d;
}

// What every start from a checkpoint takes from the scenario rather than the checkpoint (the scaler's
// settings), and what the faults change about the plan at a resume (a finished schedule decays to 0).
ResumeActions RunPlan::restore_plan(TrainCounters& restored, bool faults_resume) {
  const LossScaler configured = start().scaler;  // settings come from the scenario, state from the checkpoint
  restored.scaler.enabled = configured.enabled;
  restored.scaler.growth_interval = configured.growth_interval;
  ResumeActions ra;
  if (!faults_resume) return ra;
  for (const auto& f : faults_) f->resume(ra, restored.step);
  if (ra.finish_scheduler) plan_.schedule.spec.min_lr = 0;  // the restored scheduler ran a schedule to 0
  return ra;
}

ResumeActions RunPlan::resume(TrainCounters& restored) {
  ResumeActions ra = restore_plan(restored, true);
  if (ra.finish_scheduler) restored.sched_step = plan_.schedule.spec.total;
  if (repair_) repair_->restart(restored);
  return ra;
}

void RunPlan::carry_on(TrainCounters& restored, bool resumed) {
  restore_plan(restored, resumed);  // the counters the faults changed at that resume are the checkpoint's
  if (repair_) repair_->restart(restored);
}

std::vector<FaultTruth> RunPlan::truths() const {
  std::vector<FaultTruth> out;
  for (const auto& f : faults_) out.push_back(f->truth());
  return out;
}

OnsetClock::OnsetClock(std::vector<FaultTruth> truths) : truths_(std::move(truths)), state_(truths_.size()) {}

void OnsetClock::observe(const Record& r) {
  const bool resume = r.kind == RecordKind::event && r.name == event::resume;
  if (r.kind != RecordKind::step && !resume) return;
  for (size_t i = 0; i < truths_.size(); ++i) {
    const FaultTruth& f = truths_[i];
    if (r.rank != (f.rank >= 0 ? f.rank : 0)) continue;
    State& st = state_[i];
    if (resume) {
      st.resumed = true;
      if (f.at_resume) st.before = r.t;  // the resumed processes begin their first step here
      continue;
    }
    if (f.at_resume && !st.resumed) continue;
    if (r.step == f.onset_step && std::isnan(st.at)) st.at = r.t;
    if (r.step == f.onset_step - 1 && std::isnan(st.before)) st.before = r.t;
  }
}

double OnsetClock::onset_t(size_t i) const {
  const State& st = state_[i];
  return truths_[i].onset_at_start || std::isnan(st.at) ? st.before : st.at;
}

}  // namespace flatline
