// Intervention: the repair `flatline confirm` makes in the repaired replay of a run, for the cause its
// diagnosis names (docs/DESIGN.md §14): the fix an engineer would make, one small class per checklist
// cause, one file each in confirm/, chosen by the diagnosis' cause id (a checklist row of
// run/causes.h).
//
// The interface lives beside the fault's (faults/fault.h): a repair acts like a fault, after the faults
// (it has the last word). It sets fields of StepActions at the hook points and changes what a start from
// a checkpoint restores; faults/effects.h (RunPlan) applies it, so both step paths of the trainer carry
// it out as they carry out a fault. It is built from what the run's diagnosis and its own telemetry say
// (RepairSpec) and from the scenario's configuration (the schedule's floor, the scaler's initial scale),
// never from the scenario's fault list or the manifest: a wrong diagnosis gets the wrong repair, and
// fails to confirm.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "faults/fault.h"

namespace flatline {

struct TrainCounters;  // faults/effects.h

// What a repair is built from: the diagnosis (cause, rank, onset) and the run's own telemetry.
struct RepairSpec {
  std::string cause;       // a checklist cause (run/causes.h)
  int rank = -1;           // the rank the diagnosis names (zero_grad_rank), -1 none
  int64_t from_step = 1;   // the first step repaired: the diagnosed onset
  double lr_before = 0;    // the lr the run logged at the last step before from_step (lr_zero)
};

class Intervention {
 public:
  Intervention(RepairSpec spec, const Scenario& s) : spec_(std::move(spec)), scenario_(s) {}
  virtual ~Intervention() = default;
  const RepairSpec& spec() const { return spec_; }
  // At hook h, after the faults' actions, on steps from spec().from_step on.
  void apply(Hook h, StepActions& a) const {
    if (a.step >= spec_.from_step) act(h, a);
  }
  // At the replay's start from its checkpoint, after what the faults change about the restore: what the
  // restarted processes set differently.
  virtual void restart(TrainCounters&) const {}
  // One line: what it changes, with its values ("lr never below 3.0e-04 from step 158 ...").
  virtual std::string describe() const = 0;

 protected:
  virtual void act(Hook, StepActions&) const {}
  RepairSpec spec_;
  Scenario scenario_;  // its configuration only (schedule, optimizer, scaler); never its faults
};

using InterventionFactory = std::function<std::unique_ptr<Intervention>(const RepairSpec&, const Scenario&)>;

// Each cause's file registers its repair (FLATLINE_REGISTER_INTERVENTION). A cause registered that is not
// a checklist row of the cause table is a broken invariant (FLATLINE_CHECK at the first lookup).
void register_intervention(const std::string& cause, InterventionFactory make);
// The causes with a repair, sorted.
std::vector<std::string> intervention_causes();
bool has_intervention(const std::string& cause);
// Throws std::invalid_argument for a cause without one (fleet causes, verdicts, unknown ids).
std::unique_ptr<Intervention> make_intervention(const RepairSpec& spec, const Scenario& s);

// A RepairSpec as one JSON object (the file a repaired replay's ranks read: `worker --repair FILE`),
// and back; from_json throws std::runtime_error naming `source` and the field for bad input.
std::string to_json(const RepairSpec& r);
RepairSpec repair_from_json(const std::string& text, const std::string& source);

}  // namespace flatline

#define FLATLINE_REGISTER_INTERVENTION(Type, cause)                                                         \
  static const bool flatline_intervention_registered_##Type = [] {                                        \
    ::flatline::register_intervention(cause, [](const ::flatline::RepairSpec& r, const ::flatline::Scenario& s) { \
      return std::unique_ptr<::flatline::Intervention>(new Type(r, s));                                   \
    });                                                                                                    \
    return true;                                                                                           \
  }()
