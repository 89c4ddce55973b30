// loss_scale_collapse: the fp16 dynamic loss scaler collapses (docs/DESIGN.md §2, cause 4).
//   overflow_streak    one layer emits inf in the backward for params.steps consecutive steps (default:
//                      the lifetime, else 20); each overflow skips the step and halves the scale, so
//                      2^16 ends at 2^(16 - steps), where fp16 gradients underflow to 0 and growth
//                      needs 2000 clean steps to recover (GradScaler defaults).
//   scale_clamped_low  from `at` the scale is clamped at params.max_scale (e.g. 2^-16): scaled fp16
//                      gradients underflow to 0 while nothing overflows.
#include <fmt/format.h>

#include "faults/fault.h"

namespace flatline {
namespace {

class LossScaleCollapse : public Fault {
 public:
  LossScaleCollapse(const FaultSpec& f, const Scenario& s) : Fault(f, s) {
    if (s.precision != "fp16") refuse("needs 'precision: fp16' (no loss scaler otherwise)");
    if (f.at <= 0) refuse("needs 'at' (a single onset step)");
    if (f.mode == "overflow_streak") {
      streak_ = integer_param("steps").value_or(f.lifetime_steps > 0 ? f.lifetime_steps : 20);
    } else {
      max_scale_ = number_param("max_scale").value_or(0);
      if (!(max_scale_ > 0)) refuse("needs params.max_scale > 0");
    }
  }

  void apply(Hook h, StepActions& a) const override {
    if (spec_.mode == "overflow_streak" && h == Hook::before_forward && a.step < spec_.at + streak_)
      a.inject_inf = true;
    if (spec_.mode == "scale_clamped_low" && h == Hook::before_optimizer) a.max_loss_scale = max_scale_;
  }

  // A clamp takes effect on the scale used by the step after `at`.
  FaultTruth truth() const override {
    FaultTruth t = Fault::truth();
    if (spec_.mode == "scale_clamped_low") t.active_from = t.onset_step = spec_.at + 1;
    return t;
  }

 private:
  int64_t streak_ = 0;
  double max_scale_ = 0;
};

FLATLINE_REGISTER_FAULT(LossScaleCollapse, "loss_scale_collapse", {
    {"overflow_streak", "one layer emits inf in the backward for `steps` consecutive steps",
     {{"steps", ParamType::integer, 1, false, "overflowing steps (default: the lifetime, else 20)"}}},
    {"scale_clamped_low", "from `at` the loss scale is clamped at `max_scale`",
     {{"max_scale", ParamType::number, 0, true, "the clamp (e.g. 2^-16 = 1.52587890625e-05; required)"}}},
});

}  // namespace
}  // namespace flatline
