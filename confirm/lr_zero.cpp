// lr_zero's repair (docs/DESIGN.md §14): from the diagnosed onset, an update whose scheduled lr has
// collapsed trains with the last value the schedule gave before it collapsed (the lr the run logged at
// the step before the onset) or the configured floor (the scenario's schedule.min_lr), whichever is
// larger. Collapsed: below 0.1% of the configured peak lr, the level the lr_zero detector calls zero
// (detectors/lr_zero.h, kLowFrac); an lr above it is left as scheduled, so on a run whose lr never
// collapsed (a wrong diagnosis) the repair changes nothing. When there is no value worth holding (the lr
// had collapsed before the onset and the schedule has no floor; a warmup that never advanced), the
// collapsed update trains with the configured schedule's lr of its step (what stepping the scheduler gives).
#include <fmt/format.h>

#include <algorithm>

#include "detectors/lr_zero.h"
#include "faults/intervention.h"
#include "run/schedule.h"

namespace flatline {
namespace {

constexpr double kCollapsedFrac = lr_zero::kLowFrac;  // of the configured peak lr: the detector's "zero"

class LrZeroRepair : public Intervention {
 public:
  LrZeroRepair(const RepairSpec& r, const Scenario& s)
      : Intervention(r, s),
        collapsed_(kCollapsedFrac * s.optimizer.lr),
        hold_(std::max(r.lr_before, s.schedule.min_lr)),
        configured_(s.schedule, s.optimizer.lr) {}

  std::string describe() const override {
    if (hold_ < collapsed_)
      return fmt::format("from step {} an lr below {:.3g} ({:g}% of the peak) follows the configured schedule instead "
                         "(the lr before the onset was {:.3g}, the schedule has no floor)",
                         spec_.from_step, collapsed_, 100 * kCollapsedFrac, spec_.lr_before);
    return fmt::format("from step {} an lr below {:.3g} ({:g}% of the peak) is held at {:.3g} ({}; the lr logged "
                       "before the onset was {:.3g})",
                       spec_.from_step, collapsed_, 100 * kCollapsedFrac, hold_,
                       hold_ == spec_.lr_before ? "the last value before the collapse" : "the configured floor, min_lr",
                       spec_.lr_before);
  }

 protected:
  void act(Hook, StepActions& a) const override {
    a.lr_hold_below = collapsed_;
    a.lr_hold = hold_ >= collapsed_ ? hold_ : configured_.lr(a.step - 1);  // logged step s trains with lr(s - 1)
  }

 private:
  double collapsed_, hold_;
  LrSchedule configured_;  // the scenario's schedule as configured, before any fault's plan()
};

FLATLINE_REGISTER_INTERVENTION(LrZeroRepair, "lr_zero");

}  // namespace
}  // namespace flatline
