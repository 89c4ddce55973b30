// Confirmation by counterfactual (docs/DESIGN.md §14), the part that is plain data: from a run's
// diagnosis, scenario and telemetry, the plan of its replays (plan_confirmation); from the replays'
// telemetry, the verdict (judge). cli/confirm_run.cpp trains the replays between the two. No torch.
//
// The replays branch at the step before the diagnosed onset, from a checkpoint there when the run has
// one; else from the first checkpoint the launcher asked for when a detector fired (docs/DESIGN.md §8,
// checkpoints/live-step-N) that lies after it and still leaves the branches 2K steps (K = --last): the
// branch point moves there, the repair acts from there, and nothing is re-trained; else a prefix
// re-trains the run as it was from the latest complete checkpoint before the onset (none: step 0) up
// to the step before the onset and checkpoints it there. From the branch point two branches train to
// the scenario's last step (or --steps each): the control, as the run was, and the repaired, with the
// intervention for the diagnosed cause (faults/intervention.h). The training of the confirmation is
// the prefix plus twice the branch: at most twice the plateau (onset to end) when no prefix is needed.
//
// The verdict. The control must reproduce the run: the same steps logged, the same batches, the same
// losses (bit-identical on CPU; within the noise elsewhere), else the verdict is ambiguous. Then the
// compared series of each branch — the run's steps up to the branch point followed by the branch's —
// gives the mean of its last K values and its standard error; the difference (control − repaired) must
// exceed z standard errors of the difference (paired per step when both trained the same batches at the
// same steps, which removes the batches' own spread) and a minimum effect (a fraction of the control's
// mean: float noise is not a repair). The series is the logged training loss (`loss_avg`, rank 0), or
// the held-out loss evaluated after each of the last K steps when the run's window trains batches it had
// trained before (a replayed batch's training loss falls by memorising it, so it cannot show a repair).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "faults/intervention.h"
#include "detectors/triage.h"
#include "run/scenario.h"
#include "telemetry/record.h"

namespace flatline {

struct ConfirmOptions {
  int64_t steps = 0;         // --steps: steps each branch trains; 0: as long as the plateau lasted
  int last = 20;             // --last: K, the compared steps at the end (at most half the branch)
  double z = 3;              // standard errors the difference must exceed
  double min_effect = 1e-3;  // and this fraction of the control's mean (0.1%)
};

// How a replay's ranks start (the launcher's LaunchOptions::Start): fresh from step 0, as the run's own
// resume from that checkpoint (the run restarted there), or carrying on from a checkpoint.
enum class ReplayStart { fresh, resume, carry_on };
const char* to_string(ReplayStart s);

struct ConfirmPlan {
  std::string cause = "healthy";
  int rank = -1;
  int64_t onset = -1;             // the diagnosed onset (detected step when the diagnosis gives none)
  std::string nothing;            // not empty: there is nothing to confirm, and why
  int64_t checkpoint = -1;        // the checkpoint the replays start from; -1 none (step 0)
  ReplayStart prefix_start = ReplayStart::fresh;  // how the prefix starts from it
  int64_t branch = 0;             // B: the branches start after this step (onset - 1, or a live checkpoint's)
  ReplayStart branch_start = ReplayStart::carry_on;  // from the branch point (resume: the run restarted there)
  int64_t end = 0;                // E: the last step the branches train
  int compared = 0;               // K
  bool held_out = false;          // the compared series is the held-out loss (eval after each of the last K steps)
  RepairSpec repair;
  bool needs_prefix() const { return branch > 0 && checkpoint < branch; }
  int64_t branch_steps() const { return end - branch; }      // each branch trains
  int64_t plateau_steps() const { return end - onset + 1; }  // the run's, onset to end
  int64_t replayed_steps() const {                           // planned: prefix + both branches
    return (needs_prefix() ? branch - std::max<int64_t>(checkpoint, 0) : 0) + 2 * branch_steps();
  }
};

// `complete_checkpoints`: the steps of the run's checkpoints/step-N/COMPLETE; `live_checkpoints`: those
// of checkpoints/live-step-N/COMPLETE, asked for near a finding. `rank0`: rank 0's records in file
// order. Never reads the manifest.
ConfirmPlan plan_confirmation(const Scenario& s, const Diagnosis& d, const std::vector<Record>& rank0,
                              const std::vector<int64_t>& complete_checkpoints, const ConfirmOptions& o,
                              const std::vector<int64_t>& live_checkpoints = {});

// The step a record trained (its step record's samples_seen over the samples per step; a frozen logger
// repeats its logged step, not its samples), else its logged step.
int64_t trained_step(const Record& r, const Scenario& s);
// The same with the samples per step given (batch_size x grad_accum; <= 0: the logged step).
int64_t trained_step(const Record& r, int64_t samples_per_step);

struct SeriesStats {
  int n = 0;
  double mean = std::numeric_limits<double>::quiet_NaN(), se = std::numeric_limits<double>::quiet_NaN();
  int64_t first_step = -1, last_step = -1;  // the trained steps the values cover
};

struct Comparison {
  std::string series = "loss";  // loss (logged training loss, rank 0's loss_avg) | eval_loss (held out)
  SeriesStats control, repaired;
  bool paired = false;          // per-step differences (the same steps and batches in both)
  double difference = std::numeric_limits<double>::quiet_NaN();  // control mean - repaired mean
  double se = std::numeric_limits<double>::quiet_NaN();          // the difference's standard error
  double threshold = std::numeric_limits<double>::quiet_NaN();   // max(z se, min_effect |control mean|)
};

struct Faithfulness {
  bool faithful = false;
  int64_t steps = 0, identical = 0;  // steps compared, bit-identical losses and batches among them
  double mean_diff = 0, se = 0;      // replay - run, over the steps compared
  std::string detail;                // one line
};

enum class Verdict { confirmed, not_confirmed, ambiguous, nothing_to_confirm };
const char* to_string(Verdict v);
// 0 confirmed, 1 not confirmed, 2 ambiguous or nothing to confirm (a healthy diagnosis).
int exit_code(Verdict v);

// One replay as cmd_confirm ran it.
struct ReplayRun {
  std::string dir;                 // its run directory
  bool ran = false;
  std::string error;               // the first rank error, "" none (a control may fail as the run did)
  double wall_s = 0;
  int64_t steps_trained = 0;       // step records rank 0 logged
  std::vector<Record> rank0;       // rank 0's records, file order
};

struct ConfirmResult {
  Verdict verdict = Verdict::nothing_to_confirm;
  std::string reason;              // one line: why this verdict
  std::string run_dir;
  ConfirmPlan plan;
  std::string repair;              // the intervention's describe()
  Faithfulness control;            // does the control reproduce the run
  Comparison comparison;
  ReplayRun prefix, control_run, repaired_run;  // rank0 records are not serialised
  double wall_s = 0;               // the whole confirmation
};

// The verdict from the run's rank-0 records and the replays'.
ConfirmResult judge(const Scenario& s, const ConfirmPlan& p, const std::vector<Record>& original,
                    const ReplayRun& prefix, const ReplayRun& control, const ReplayRun& repaired,
                    const ConfirmOptions& o);

std::string to_text(const ConfirmResult& r);  // the terminal's lines
std::string to_json(const ConfirmResult& r);  // confirm.json
// Throws std::runtime_error naming `source` for what is not a confirm.json.
ConfirmResult confirm_from_json(const std::string& text, const std::string& source);

}  // namespace flatline
