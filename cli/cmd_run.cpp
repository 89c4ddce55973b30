// `flatline run SCENARIO.yaml [--out DIR]`: trains the scenario's ranks, prints each finding the moment a
// detector fires, then the diagnosis with its checklist and the verdict against the ground truth.
// On a terminal a progress line (step / total, loss, steps/s, ETA) is updated in place while it trains
// (cli/progress.h); elsewhere a plain line per tenth of the steps.
// Exit status: 0 when the scenario's `expect` is met, 1 otherwise (a harness error, an output that could
// not be written), 2 for a bad scenario or one this machine cannot run locally, 128 + N when signal N
// interrupted it (130 for Ctrl-C, 143 for SIGTERM).
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>

#include "cli/command.h"
#include "cli/launch.h"
#include "cli/progress.h"
#include "core/protocol.h"
#include "scoring/score.h"
#include "faults/scenario_file.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string scenario, out = "runs", rank_wrapper, master_addr;
  bool oversubscribe = false;
  PlacementArgs placement;
  TrainerArg trainer;
};

int run(const Args& a) {
  const std::string text = read_text_file(a.scenario);
  Scenario s = load_scenario_text(text, a.scenario);
  a.placement.apply(s);
  a.trainer.apply(s);
  std::cout << fmt::format("flatline run {}: {} ranks, {} steps ({})\n", s.name, s.world_size, s.steps,
                           s.trainer.command.empty() ? fmt::format("{} on {}", s.model.kind, s.data.kind)
                                                     : "external trainer: " + s.trainer.command)
            << std::flush;
  LaunchOptions o;
  o.run_dir = a.out + "/" + s.name;
  o.self_exe = self_exe();
  o.oversubscribe = a.oversubscribe;
  o.rank_wrapper = a.rank_wrapper;
  o.master_addr = a.master_addr;
  Progress progress(std::cout, isatty(STDOUT_FILENO) != 0, s.steps);
  o.progress = &progress;
  o.device = a.placement.device;
  o.process_group = a.placement.process_group;
  LaunchResult r = launch_run(s, text, o);
  std::cout << to_text(r.diagnosis);
  RunScore sc = score_run(r.manifest, r.diagnosis);
  // A run that died of something other than the fault it injected proves nothing either way.
  std::cout << fmt::format("\nrun directory: {}\nground truth: {}{}; verdict: {}\n", o.run_dir, sc.truth_cause,
                           sc.truth_rank >= 0 ? fmt::format(" (rank {})", sc.truth_rank) : "",
                           r.interrupted_by ? "INTERRUPTED"
                           : sc.harness_error ? "RUN FAILED (see the error below)"
                           : sc.correct       ? "correct"
                                              : (sc.false_alarm ? "FALSE ALARM" : "MISSED"));
  if (!r.first_error.empty()) std::cout << "run ended with an error: " << r.first_error << "\n";
  for (const auto& e : r.write_errors) std::cout << "error: " << e << "\n";
  if (r.interrupted_by) return kExitSignalBase + r.interrupted_by;  // as a shell expects: 130, 143
  if (!r.write_errors.empty()) return 1;
  return sc.expect_met ? 0 : 1;
}

FLATLINE_COMMAND("run", "train a scenario's ranks, diagnose live, print the diagnosis", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenario", a->scenario, "scenario YAML file")->required();
  sub.add_option("--out", a->out, "parent directory of the run directory (default runs/)");
  sub.add_flag("--oversubscribe", a->oversubscribe,
               "more ranks than the local guard allows per core (cli/local_guard.h; memory is still checked)");
  sub.add_option("--rank-wrapper", a->rank_wrapper,
                 "a command each rank runs under, {rank} replaced by its rank (numactl ..., ip netns exec host{rank})");
  sub.add_option("--master-addr", a->master_addr, "MASTER_ADDR for the ranks (default 127.0.0.1): rank 0's host");
  a->placement.add(sub);
  a->trainer.add(sub);
  return [a] { return run(*a); };
});

}  // namespace
}  // namespace flatline::cli
