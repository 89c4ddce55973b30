#include "faults/plan_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "faults/effects.h"

namespace flatline {
namespace {

// The fields of a step's actions that differ from a healthy step's (step and rank aside).
nlohmann::json set_fields(const StepActions& a) {
  const StepActions healthy;
  nlohmann::json j = nlohmann::json::object();
  if (a.zero_grads) j["zero_grads"] = true;
  if (a.skip_backward) j["skip_backward"] = true;
  if (a.freeze_logging) j["freeze_logging"] = true;
  if (a.inject_inf) j["inject_inf"] = true;
  if (a.scheduler_frozen) j["scheduler_frozen"] = true;
  if (a.block_s != healthy.block_s) j["block_s"] = a.block_s;
  if (a.data_block_s != healthy.data_block_s) j["data_block_s"] = a.data_block_s;
  if (a.slowdown != healthy.slowdown) j["slowdown"] = a.slowdown;
  if (std::isfinite(a.max_loss_scale)) j["max_loss_scale"] = a.max_loss_scale;
  if (a.batch_index >= 0 && a.batch_index != a.step - 1) j["batch_index"] = a.batch_index;
  return j;
}

}  // namespace

std::string plan_json(const Scenario& s) {
  const RunPlan plan(s);
  nlohmann::json out = {{"format", kPlanFormat},
                        {"name", s.name},
                        {"seed", s.seed},
                        {"world_size", s.world_size},
                        {"steps", s.steps},
                        {"log_every", s.log_every},
                        {"heartbeat_s", s.heartbeat_s},
                        {"collective_timeout_s", s.collective_timeout_s},
                        {"precision", s.precision},
                        {"device", s.device}};
  nlohmann::json actions = nlohmann::json::array();
  for (int r = 0; r < s.world_size; ++r) {
    nlohmann::json run;  // the open run of equal actions
    int64_t from = 0, to = 0;
    auto close = [&] {
      if (run.is_null() || run.empty()) return;
      nlohmann::json j = {{"rank", r}, {"from", from}, {"to", to}};
      j.update(run);
      actions.push_back(std::move(j));
    };
    for (int64_t step = 1; step <= s.steps; ++step) {
      nlohmann::json f = set_fields(plan.actions(step, r, s.world_size));
      // batch_index changes every step of a cycle: such steps are never merged
      if (!run.is_null() && f == run && to == step - 1 && !f.contains("batch_index")) {
        to = step;
        continue;
      }
      close();
      run = std::move(f);
      from = to = step;
    }
    close();
  }
  out["actions"] = std::move(actions);
  const LrSchedule healthy(s.schedule, s.optimizer.lr);
  nlohmann::json factors = nlohmann::json::array();
  for (int64_t step = 1; step <= s.steps; ++step) {
    const double a = plan.schedule().lr(step - 1), b = healthy.lr(step - 1);
    if (a == b) continue;
    factors.push_back({step, a == 0 || b == 0 ? 0.0 : a / b});
  }
  out["lr_factor"] = std::move(factors);
  out["checkpoint_every"] = s.checkpoint_every;
  out["restart_at"] = s.restart_at;
  if (s.restart_at > 0) {
    RunPlan resumed(s);  // its own: resume() changes what it plans after the restart
    TrainCounters restored = resumed.start();
    restored.step = resume_checkpoint_step(s);
    const ResumeActions ra = resumed.resume(restored);
    out["resume"] = {{"from_step", restored.step},
                     {"restore_sampler", ra.restore_sampler},
                     {"finish_scheduler", ra.finish_scheduler}};
  }
  return out.dump() + "\n";
}

}  // namespace flatline
