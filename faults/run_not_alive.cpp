// run_not_alive: the step counter stops (docs/DESIGN.md §2, cause 1).
//   hang           the target rank blocks before the gradient all-reduce for params.timeout_s (default:
//                  the collective timeout + 10 s); the other ranks wait inside the all-reduce, their
//                  heartbeats go on, and the collective timeout ends the run with an error on every rank.
//   stale_logging  training goes on, but from `at` the logged step and loss stop changing (a logger
//                  that keeps printing a cached value).
//   data_stall     the target ranks (all by default) block fetching their batch for params.timeout_s
//                  (default: an hour), heartbeats going on in phase "data": a stalled file system, a
//                  deadlocked loader. One rank: its peers wait in the all-reduce and time out. Every rank:
//                  no collective times out, and the launcher's progress watchdog ends the run
//                  (core/protocol.h progress_bound_s); the simulator stops it at the same bound.
#include <fmt/format.h>

#include "core/protocol.h"
#include "faults/fault.h"

namespace flatline {
namespace {

class RunNotAlive : public Fault {
 public:
  RunNotAlive(const FaultSpec& f, const Scenario& s) : Fault(f, s) {
    if (f.mode == "hang" && s.world_size < 2)
      throw ScenarioError(fmt::format("{}:{}: run_not_alive/hang needs world_size >= 2 (a peer to wait for it)",
                                      s.source, f.line));
    if (f.mode == "hang" && f.target_rank < 0)
      throw ScenarioError(fmt::format("{}:{}: run_not_alive/hang needs a target rank", s.source, f.line));
    if (f.mode == "hang") block_s_ = number_param("timeout_s").value_or(s.collective_timeout_s + kHangPastTimeoutS);
    if (f.mode == "data_stall") block_s_ = number_param("timeout_s").value_or(kDataStallS);
  }

  FaultTruth truth() const override {
    FaultTruth t = Fault::truth();
    // hang: its peers' all-reduce times out; data_stall: that, or the launcher's watchdog: the run ends in error
    t.ends_run = spec_.mode == "hang" || spec_.mode == "data_stall";
    t.onset_at_start = t.ends_run;  // the rank stops making progress when the step begins
    return t;
  }

  void apply(Hook h, StepActions& a) const override {
    if (spec_.mode == "hang" && h == Hook::at_allreduce && a.step == first_active_step()) a.block_s = block_s_;
    if (spec_.mode == "stale_logging" && h == Hook::at_logging) a.freeze_logging = true;
    if (spec_.mode == "data_stall" && h == Hook::before_forward && a.step == first_active_step()) a.data_block_s = block_s_;
  }

 private:
  static constexpr double kDataStallS = 3600;  // s: far past any watchdog, as a stalled mount is
  double block_s_ = 0;
};

FLATLINE_REGISTER_FAULT(RunNotAlive, "run_not_alive", {
    {"hang", "the target rank blocks before the gradient all-reduce for `timeout_s`",
     {{"timeout_s", ParamType::number, 0, true,
       "seconds it blocks (default: the collective timeout + kHangPastTimeoutS, core/protocol.h)"}}},
    {"stale_logging", "training goes on, the logged step and loss stop changing", {}},
    {"data_stall", "the target ranks (all by default) block fetching their batch for `timeout_s`, heartbeats going on",
     {{"timeout_s", ParamType::number, 0, true, "seconds they block (default 3600: until the watchdog stops the run)"}}},
});

}  // namespace
}  // namespace flatline
