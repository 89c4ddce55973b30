// data_replay: the data repeats (DESIGN.md cause 3).
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
    auto bad = [&](const std::string& why) {
      throw ScenarioError(fmt::format("{}:{}: data_replay/{}: {}", s.source, f.line, f.mode, why));
    };
    if (f.at <= 0) bad("needs 'at' (a single onset step)");
    if (f.mode == "resume_drops_sampler_state" && (s.restart_at < 0 || s.restart_at < s.checkpoint_every))
      bad("needs a 'restart: {at: N}' at or after the first checkpoint (nothing is replayed before it)");
    window_ = f.params.count("window") ? static_cast<int64_t>(f.params.at("window")) : 0;
    if (f.mode == "cycle_window" && window_ < 1) bad("needs params.window >= 1 (batches in the cycle)");
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

FLATLINE_REGISTER_FAULT("data_replay", DataReplay);

}  // namespace
}  // namespace flatline
