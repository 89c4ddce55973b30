// data_replay: the data repeats (docs/DESIGN.md §2, cause 3).
//   resume_drops_sampler_state  at the scenario's restart everything is restored but the sampler
//                               position: the loader starts its epoch over and replays batches already
//                               trained on.
//   cycle_window                from `at` the loader repeats the same params.window batches (a cached
//                               iterator re-created each time, an index that wraps).
#include <fmt/format.h>

#include "faults/fault.h"

namespace flatline {
namespace {

class DataReplay : public Fault {
 public:
  DataReplay(const FaultSpec& f, const Scenario& s) : Fault(f, s) {
    if (f.at <= 0) refuse("needs 'at' (a single onset step)");
    if (f.mode == "resume_drops_sampler_state" && (s.restart_at < 0 || s.restart_at < s.checkpoint_every))
      refuse("needs a 'restart: {at: N}' at or after the first checkpoint (nothing is replayed before it)");
    if (f.mode == "cycle_window") {
      window_ = integer_param("window").value_or(0);
      if (window_ < 1) refuse("needs params.window >= 1 (batches in the cycle)");
    }
  }

  // Step s normally trains global batch s - 1; in the cycle it trains at - 1 + (s - at) % window.
  void apply(Hook h, StepActions& a) const override {
    if (spec_.mode == "cycle_window" && h == Hook::before_forward)
      a.batch_index = (spec_.at - 1) + (a.step - spec_.at) % window_;
  }

  void resume(ResumeActions& r, int64_t) const override {
    if (spec_.mode == "resume_drops_sampler_state") r.restore_sampler = false;
  }

  // The first batch that differs from the healthy twin is the first replayed one.
  FaultTruth truth() const override {
    FaultTruth t = Fault::truth();
    if (spec_.mode == "cycle_window") {
      t.active_from = t.onset_step = spec_.at + window_;
    } else {  // the resumed run restarts at the checkpoint before the restart point
      t.active_from = t.onset_step = resume_checkpoint_step(scenario_) + 1;
      t.at_resume = true;
    }
    return t;
  }

 private:
  int64_t window_ = 0;
};

FLATLINE_REGISTER_FAULT(DataReplay, "data_replay", {
    {"resume_drops_sampler_state", "at the restart everything is restored but the sampler position", {}},
    {"cycle_window", "from `at` the loader repeats the same `window` batches",
     {{"window", ParamType::integer, 1, false, "batches in the cycle (required)"}}},
});

}  // namespace
}  // namespace flatline
