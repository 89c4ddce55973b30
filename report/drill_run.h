// DrillRun: the hidden run a drill is played on (docs/DESIGN.md §12), and where it comes from.
//
// Out of the box, a run shaped like the interview question: the fleet simulator (sim/simulate, the
// same fault definitions and RunPlan as training) walks one of the drill scenarios
// (scenarios/drill/*.yaml, `fleet_only`): ~1000 ranks, tens of thousands of steps, a normal descent
// and, near the step the prompt names, one of the five causes of a flat loss or a healthy look-alike
// (a restart that resumes correctly, a cosine tail, fp16's own overflow rhythm). The seed draws:
//   1. the cause: one of the distinct `expect.cause` values of the scenarios (checklist order, then
//      healthy), uniformly, then one scenario of that cause (drill_pick, splitmix64);
//   2. the plateau step P, uniform in [0.6, 0.8) x steps (30k..40k of 50k), the step the prompt names;
//   3. the rank at fault, for a fault on one rank, uniform over the ranks;
//   4. the simulation's own noise (the scenario's seed becomes the drill seed).
// The scenario is then moved to the requested shape (plan_drill): world_size = ranks and steps =
// steps; with k = steps / the file's steps, the checkpoint and eval intervals, the warmup and the
// schedule total are scaled by k; the file's first event (its earliest fault `at` or its restart)
// moves to P and every other fault `at` / restart keeps its distance to it, scaled by k; the fault
// parameters (a cycle's window, a streak's length) stay. The variant is written with to_yaml and
// loaded again, so it passes every check of the scenario loader and the fault registry.
//
// With `--from DIR`, a run recorded by `flatline score --out DIR` (or `flatline simulate --out`),
// drawn by the seed among the run directories with a manifest; its telemetry is read one rank file
// at a time into the summary and the detectors (memory: one rank file at a time).
#pragma once
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "detectors/triage.h"
#include "run/scenario.h"
#include "report/run_summary.h"
#include "telemetry/manifest.h"

namespace flatline {

struct DrillShape {
  int ranks = 1024;        // simulated ranks (>= 2: a zero-gradient rank needs a peer)
  int64_t steps = 50000;   // simulated steps (>= 1000: the plateau needs room on either side)
};
constexpr int kDrillMinRanks = 2;
constexpr int64_t kDrillMinSteps = 1000;

// Which of n things a seed picks (splitmix64, the same on every platform); 0 when n is 0.
size_t drill_pick(size_t n, uint64_t seed);

// A scenario file's text and where it came from (e.g. the embedded scenarios/drill/*.yaml).
using ScenarioText = std::pair<std::string, std::string>;  // (source, YAML)

struct DrillPlan {
  Scenario scenario;           // the variant to simulate (loaded, validated)
  std::string source;          // the file it came from
  std::string cause;           // its expect.cause
  int64_t plateau_step = 0;    // P: the step the prompt names
  size_t causes = 0, files = 0;  // what the seed drew from: distinct causes, scenario files
};

// Splits `scenarios` by expect.cause and draws one for `seed` (see above). Throws ScenarioError for a
// file the loader refuses, for a shape outside the minimums, and when `scenarios` is empty.
DrillPlan plan_drill(const std::vector<ScenarioText>& scenarios, uint64_t seed, const DrillShape& shape);
// The same for one given scenario (`flatline drill --scenario FILE`): only the plateau, the rank and
// the shape are drawn.
DrillPlan plan_drill_of(const ScenarioText& scenario, uint64_t seed, const DrillShape& shape);
// The variant of `s` moved to the shape, P and the rank at fault (see above), validated by the loader.
Scenario drill_variant(const Scenario& s, const DrillShape& shape, int64_t plateau, int fault_rank);

struct DrillRun {
  std::string origin;          // one line: where the run came from, without a hint of its cause
  std::string prompt;          // the interview question, with the step it names
  std::string name, dir;       // revealed in the summary: the scenario's name, its file or run directory
  std::optional<Manifest> manifest;          // the hidden truth
  std::shared_ptr<const RunSummary> summary;
  std::shared_future<Diagnosis> diagnosis;  // the detectors' diagnosis; may still be computing
  std::vector<std::string> warnings;        // malformed telemetry lines of a recorded run
  bool detectors_ready() const;
};

// Simulates the plan into a RunSummary (the views) and runs the detectors over the same telemetry: with
// std::launch::async a second simulation streams into a Triage on its own thread while the drill is
// played (O(ranks) memory; the summary waits for it); std::launch::deferred runs it when first asked.
DrillRun simulate_drill(const DrillPlan& plan, uint64_t seed, std::launch detectors = std::launch::async);

// The recorded run directories under `dir` that have a manifest (the truth), sorted; [] when none.
std::vector<std::string> recorded_drill_dirs(const std::string& dir);
// A recorded run's manifest.json, its hidden truth, cannot be read: the drill refuses the run rather
// than score it against "healthy".
struct DrillTruthError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Reads one recorded run for the drill. Throws DrillTruthError when its manifest cannot be read,
// std::runtime_error when it has no telemetry.
DrillRun recorded_drill(const std::string& dir);

// "Training loss went flat at step 37k after descending normally. Walk me through how you debug it."
// (steps of 10k and more are named in thousands, as a dashboard's axis shows them); step < 0: no step.
std::string drill_prompt(int64_t step);

}  // namespace flatline
