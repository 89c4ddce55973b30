// zero_grad_rank: one data-parallel rank sends zeros into the gradient all-reduce (docs/DESIGN.md §2, cause 5).
//   zeroed_buffer     the target rank's gradient buffer is zeroed just before the all-reduce (a hook or
//                     a bucket view that clears it).
//   skipped_backward  the target rank skips backward (a loss it thinks is invalid, an early `continue`)
//                     and contributes zeros. The averaged gradient is (W - 1) / W of the true one and the
//                     rank's data no longer trains the model: a quiet, partial plateau.
#include <fmt/format.h>

#include "faults/fault.h"

namespace flatline {
namespace {

class ZeroGradRank : public Fault {
 public:
  ZeroGradRank(const FaultSpec& f, const Scenario& s) : Fault(f, s) {
    if (f.target_rank < 0 || s.world_size < 2)
      throw ScenarioError(fmt::format("{}:{}: zero_grad_rank/{}: needs world_size >= 2 and one target rank",
                                      s.source, f.line, f.mode));
  }

  void apply(Hook h, StepActions& a) const override {
    if (spec_.mode == "zeroed_buffer" && h == Hook::after_backward) a.zero_grads = true;
    if (spec_.mode == "skipped_backward" && h == Hook::before_forward) a.skip_backward = true;
  }
};

FLATLINE_REGISTER_FAULT(ZeroGradRank, "zero_grad_rank", {
    {"zeroed_buffer", "the target rank's gradient buffer is zeroed just before the all-reduce", {}},
    {"skipped_backward", "the target rank skips backward and contributes zeros", {}},
});

}  // namespace
}  // namespace flatline
