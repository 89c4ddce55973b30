// loss_scale_collapse's repair (docs/DESIGN.md §14): at the restart the fp16 loss scaler is reset to its
// initial scale (the scenario's loss_scaler.init_scale, GradScaler's 2^16 by default) with a fresh
// growth tracker, any cap on the scale is lifted, and the scale never backs off below its initial value
// again (a floor, as DeepSpeed's min_loss_scale and Megatron-LM's --min-loss-scale): an overflow still
// skips its step, but cannot collapse the scale to where gradients underflow. Without fp16 there is no
// scaler and the repair changes nothing.
#include <fmt/format.h>

#include <limits>

#include "faults/intervention.h"
#include "faults/effects.h"

namespace flatline {
namespace {

class LossScaleRepair : public Intervention {
 public:
  using Intervention::Intervention;

  void restart(TrainCounters& c) const override {
    if (!c.scaler.enabled) return;
    c.scaler.scale = scenario_.loss_scale_init;
    c.scaler.growth_tracker = 0;
  }

  std::string describe() const override {
    if (scenario_.precision != "fp16") return "no loss scaler (not fp16): nothing to reset";
    return fmt::format("the loss scale reset to {:g} (its initial scale) at the restart, no cap, and never below "
                       "{:g} from step {}",
                       scenario_.loss_scale_init, scenario_.loss_scale_init, spec_.from_step);
  }

 protected:
  void act(Hook, StepActions& a) const override {
    a.max_loss_scale = std::numeric_limits<double>::infinity();
    a.min_loss_scale = scenario_.precision == "fp16" ? scenario_.loss_scale_init : 0;
  }
};

FLATLINE_REGISTER_INTERVENTION(LossScaleRepair, "loss_scale_collapse");

}  // namespace
}  // namespace flatline
