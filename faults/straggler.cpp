// straggler: a fleet fault, not a checklist cause (a slow rank makes every step slower, it does not
// flatten the loss). One rank among many computes k% slower (thermal throttling, a noisy neighbour,
// a degraded NIC's host); the gradient all-reduce waits for it, so every rank's step time follows
// and the fast ranks' comm_ms (time inside the all-reduce) grows by the difference.
//   slow_rank   from `at`, the target rank's forward + backward take (1 + params.slowdown) x as long
//               (default slowdown 0.3 = 30% slower). The harness sleeps that extra time after the
//               backward; the fleet simulator scales the rank's compute time.
#include <fmt/format.h>

#include "faults/fault.h"

namespace flatline {
namespace {

class Straggler : public Fault {
 public:
  Straggler(const FaultSpec& f, const Scenario& s) : Fault(f, s) {
    if (f.target_rank < 0 || s.world_size < 2)
      throw ScenarioError(fmt::format("{}:{}: straggler/{}: needs world_size >= 2 and one target rank", s.source,
                                      f.line, f.mode));
    slowdown_ = number_param("slowdown").value_or(0.3);
  }

  void apply(Hook h, StepActions& a) const override {
    if (h == Hook::before_forward) a.slowdown = slowdown_;
  }

 private:
  double slowdown_ = 0.3;
};

FLATLINE_REGISTER_FAULT(Straggler, "straggler", {
    {"slow_rank", "from `at` the target rank's forward + backward take (1 + slowdown) x as long",
     {{"slowdown", ParamType::number, 0, true, "extra compute as a fraction (default 0.3 = 30% slower)"}}},
});

}  // namespace
}  // namespace flatline
