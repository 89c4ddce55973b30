// run_not_alive's repair (docs/DESIGN.md §14): all ranks restarted from the checkpoint — new processes,
// so what was stuck in the old ones does not come back: no rank blocks before a collective, and the
// logger logs each step as it is trained (a frozen logger's cached step and loss are gone).
#include <fmt/format.h>

#include "faults/intervention.h"

namespace flatline {
namespace {

class RunNotAliveRepair : public Intervention {
 public:
  using Intervention::Intervention;

  std::string describe() const override {
    return fmt::format("all ranks restarted from the checkpoint before step {}: no rank blocks, the logger logs "
                       "every step",
                       spec_.from_step);
  }

 protected:
  void act(Hook, StepActions& a) const override {
    a.block_s = 0;
    a.freeze_logging = false;
  }
};

FLATLINE_REGISTER_INTERVENTION(RunNotAliveRepair, "run_not_alive");

}  // namespace
}  // namespace flatline
