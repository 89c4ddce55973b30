// `flatline run SCENARIO.yaml [--out DIR]`: trains the scenario's ranks, prints each finding the moment a
// detector fires, then the diagnosis with its checklist and the verdict against the ground truth.
// Exit status: 0 when the scenario's `expect` is met, 1 otherwise, 2 for a bad scenario.
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "cli/launch.h"
#include "detectors/score.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string scenario, out = "runs";
  PlacementArgs placement;
};

int run(const Args& a) {
  const std::string text = read_text_file(a.scenario);
  Scenario s = load_scenario_text(text, a.scenario);
  a.placement.apply(s);
  std::cout << fmt::format("flatline run {}: {} ranks, {} steps ({} on {})\n", s.name, s.world_size, s.steps,
                           s.model.kind, s.data.kind)
            << std::flush;
  LaunchOptions o;
  o.run_dir = a.out + "/" + s.name;
  o.self_exe = self_exe();
  o.device = a.placement.device;
  o.process_group = a.placement.process_group;
  LaunchResult r = launch_run(s, text, o);
  std::cout << to_text(r.diagnosis);
  RunScore sc = score_run(r.manifest, r.diagnosis);
  // A run that died of something other than the fault it injected proves nothing either way.
  const bool broke = !r.first_error.empty() && !r.manifest.failure_expected();
  std::cout << fmt::format("\nrun directory: {}\nground truth: {}{}; verdict: {}\n", o.run_dir, sc.truth_cause,
                           sc.truth_rank >= 0 ? fmt::format(" (rank {})", sc.truth_rank) : "",
                           broke ? "RUN FAILED (see the error below)"
                                 : sc.correct ? "correct" : (sc.false_alarm ? "FALSE ALARM" : "MISSED"));
  if (!r.first_error.empty()) std::cout << "run ended with an error: " << r.first_error;
  return sc.expect_met && !broke ? 0 : 1;
}

FLATLINE_COMMAND("run", "train a scenario's ranks, diagnose live, print the diagnosis", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenario", a->scenario, "scenario YAML file")->required();
  sub.add_option("--out", a->out, "parent directory of the run directory (default runs/)");
  a->placement.add(sub);
  return [a] { return run(*a); };
});

}  // namespace
}  // namespace flatline::cli
