// Fault: one injected failure, applied at the hook points of the training step (docs/DESIGN.md
// §5). Plain C++ so that the torch harness and the fleet simulator share one definition
// of each fault: a fault never touches tensors, it sets fields of StepActions and the trainer (or the
// simulator) carries them out at visible calls in its step.
//
// One file per fault kind in faults/, each registering itself with FLATLINE_REGISTER_FAULT.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "run/scenario.h"
#include "run/schedule.h"
#include "telemetry/manifest.h"

namespace flatline {

// The hook points of one training step, in the order the trainer reaches them.
enum class Hook {
  before_forward,    // the step begins: before its batch is fetched (a fault may choose the batch)
  after_backward,    // local gradients exist, before the all-reduce
  at_allreduce,      // entering the gradient all-reduce
  before_optimizer,  // averaged gradients, before unscale/clip/update
  at_logging,        // the step record is about to be written
};

// What a fault asks the trainer to do this step. The trainer resets it before each step.
struct StepActions {
  int64_t step = 0;            // global step being trained (1-based)
  int rank = 0, world_size = 1;
  bool zero_grads = false;     // zero this rank's gradient buffer before the all-reduce
  bool skip_backward = false;  // do not run backward; contribute zero gradients
  double block_s = 0;          // block this long before the all-reduce (a hang)
  double data_block_s = 0;     // block this long fetching the batch, heartbeats going on (a stalled loader)
  bool freeze_logging = false; // log the step and loss of the last step logged before the fault
  bool inject_inf = false;     // one activation emits inf (fp16 overflow in the backward)
  double max_loss_scale = std::numeric_limits<double>::infinity();  // clamp the dynamic loss scale
  int64_t batch_index = -1;    // >= 0: fetch this sampler batch index instead of the next one
  bool scheduler_frozen = false;  // the LR scheduler does not step after this update
  double slowdown = 0;         // this rank's forward + backward take (1 + slowdown) x as long (a straggler)
  // Set only by a confirmation's repair (faults/intervention.h), after the faults; never by a fault.
  double lr_hold = 0, lr_hold_below = 0;  // an update whose scheduled lr is below lr_hold_below trains with
                                          // lr_hold instead (lr_zero's repair)
  double min_loss_scale = 0;   // the dynamic loss scale never backs off below this (loss_scale_collapse's)
};

// What a fault may change when ranks resume from a checkpoint (a `restart` in the scenario).
struct ResumeActions {
  bool restore_sampler = true;       // false: the loader starts its epoch over
  bool finish_scheduler = false;     // restore a finished schedule's state (lr decayed to 0)
};

// The training plan a fault may alter before step 1 (e.g. an LR schedule sized too short).
struct TrainPlan {
  LrSchedule schedule;
};

class Fault {
 public:
  Fault(FaultSpec spec, const Scenario& scenario);
  virtual ~Fault() = default;
  const FaultSpec& spec() const { return spec_; }
  // True when the fault acts at this step on this rank (onset, lifetime, target).
  bool active(int64_t step, int rank) const;
  bool targets(int rank) const { return spec_.target_rank < 0 || spec_.target_rank == rank; }
  // First step at which active() holds for some rank, or -1.
  int64_t first_active_step() const;
  virtual void plan(TrainPlan&) const {}
  virtual void apply(Hook, StepActions&) const {}
  virtual void resume(ResumeActions&, int64_t /*resume_step*/) const {}
  // Its ground truth (telemetry/manifest.h) but onset_t (timed as the run goes: OnsetClock). Default:
  // both steps are the first active step.
  virtual FaultTruth truth() const;

 protected:
  // A parameter of this fault's mode, as its registration declares it (name and type; FLATLINE_CHECK
  // otherwise: reading an undeclared parameter is a bug). nullopt when the scenario does not give it.
  std::optional<int64_t> integer_param(const char* name) const;
  std::optional<double> number_param(const char* name) const;
  // A ScenarioError "source:line: kind/mode: why" for a scenario this fault cannot act on.
  [[noreturn]] void refuse(const std::string& why) const;

  FaultSpec spec_;
  Scenario scenario_;  // a copy: faults outlive the loader's temporaries
  std::vector<int64_t> onsets_;  // chosen onset steps (one for `at`; seeded picks for `range`)
};

// ---- the fault registry: each kind declares its modes and their typed parameters ------------------
// The scenario loader builds its tables and error messages from it (faults/scenario_file.cpp): an unknown
// kind, mode or parameter, a non-integer where an integer is meant and a value below a parameter's
// minimum are ScenarioErrors with file:line:column. Each kind names the cause it injects (a row of
// run/causes.h; by default its own name): the manifest records it as the scorer's truth, so a
// second way to make a run not alive is a new kind whose cause is run_not_alive.
enum class ParamType { integer, number };

struct ParamDef {
  std::string name;
  ParamType type = ParamType::number;
  double min = 0;         // the smallest meaningful value
  bool above_min = true;  // true: the value must be > min; false: >= min
  std::string help;       // meaning, unit and default
};

struct ModeDef {
  std::string name;
  std::string help;
  std::vector<ParamDef> params;
  const ParamDef* param(const std::string& n) const;
};

using FaultFactory = std::function<std::unique_ptr<Fault>(const FaultSpec&, const Scenario&)>;

struct FaultKindDef {
  std::string kind;
  std::string cause;  // the cause it injects ("" at registration: the kind's own name)
  std::vector<ModeDef> modes;
  FaultFactory make;
  const ModeDef* mode(const std::string& m) const;
};

void register_fault_kind(FaultKindDef def);
const FaultKindDef* find_fault_kind(const std::string& kind);  // nullptr when not registered
std::vector<std::string> fault_kind_names();                    // sorted

// The checkpoint step a scenario's restart resumes from (the last checkpoint at or before restart.at);
// the resumed ranks train again from the step after it. -1 without a restart.
int64_t resume_checkpoint_step(const Scenario& s);

// The manifest of a run of `s` (status "running"): the resolved scenario, its expectation and each
// fault's truth(). `versions` names what produced the run (harness or simulator).
Manifest scenario_manifest(const Scenario& s, const std::string& versions);

// Builds every fault of the scenario; throws ScenarioError (with file:line) for a mode whose
// preconditions the scenario does not meet.
std::vector<std::unique_ptr<Fault>> make_faults(const Scenario& s);

// Applies every fault at one hook point.
void apply_all(const std::vector<std::unique_ptr<Fault>>& faults, Hook h, StepActions& a);

}  // namespace flatline

// In a fault's file: FLATLINE_REGISTER_FAULT(Type, "kind", {{"mode", "help", {params...}}, ...}) for a
// kind named after the cause it injects, FLATLINE_REGISTER_FAULT_CAUSING(Type, "kind", "cause", {...})
// for another way to inject an existing cause.
#define FLATLINE_REGISTER_FAULT_CAUSING(Type, kind, cause, ...)                                      \
  static const bool flatline_fault_registered_##Type = [] {                                          \
    ::flatline::register_fault_kind(                                                                 \
        {kind, cause, std::vector<::flatline::ModeDef> __VA_ARGS__,                                  \
         [](const ::flatline::FaultSpec& f, const ::flatline::Scenario& s) {                         \
           return std::unique_ptr<::flatline::Fault>(new Type(f, s));                                \
         }});                                                                                        \
    return true;                                                                                     \
  }()
#define FLATLINE_REGISTER_FAULT(Type, kind, ...) FLATLINE_REGISTER_FAULT_CAUSING(Type, kind, "", __VA_ARGS__)
