// zero_grad_rank's repair (docs/DESIGN.md §14): from the diagnosed onset the named rank's own gradient
// goes into the all-reduce again — its buffer is not zeroed and its backward runs — as when the rank is
// moved to a healthy node or its gradient hook fixed. (Leaving its zeros out of the mean instead only
// rescales the averaged gradient, which AdamW's update m / sqrt(v) cancels: it cannot show the loss the
// rank's data was worth.)
#include <fmt/format.h>

#include "faults/intervention.h"

namespace flatline {
namespace {

class ZeroGradRankRepair : public Intervention {
 public:
  using Intervention::Intervention;

  std::string describe() const override {
    return fmt::format("from step {} rank {}'s own gradient goes into the all-reduce again (no zeroed buffer, no "
                       "skipped backward)",
                       spec_.from_step, spec_.rank);
  }

 protected:
  void act(Hook, StepActions& a) const override {
    if (a.rank != spec_.rank) return;
    a.zero_grads = false;
    a.skip_backward = false;
  }
};

FLATLINE_REGISTER_INTERVENTION(ZeroGradRankRepair, "zero_grad_rank");

}  // namespace
}  // namespace flatline
