// data_replay's repair (docs/DESIGN.md §14): from the diagnosed onset the sampler draws fresh batches —
// each step trains the global batch its step count implies (step s: batch s - 1 counted from the start
// of training, which runs on into later epochs' orders), whatever the loader would have replayed (a
// cycling window, an epoch started over at a resume).
#include <fmt/format.h>

#include "faults/intervention.h"

namespace flatline {
namespace {

class DataReplayRepair : public Intervention {
 public:
  using Intervention::Intervention;

  std::string describe() const override {
    return fmt::format("from step {} each step trains the batch its step count implies (global batch step - 1), "
                       "fresh data instead of a replay",
                       spec_.from_step);
  }

 protected:
  void act(Hook, StepActions& a) const override { a.batch_index = a.step - 1; }
};

FLATLINE_REGISTER_INTERVENTION(DataReplayRepair, "data_replay");

}  // namespace
}  // namespace flatline
