// `flatline drill [--seed K] [--ranks N] [--steps S] [--scenario FILE | --from DIR] [--answers FILE]
// [--explain]`: the interview question "loss went flat at step 40k" on a hidden run (report/drill.h).
// Out of the box the run is simulated (report/drill_run.h): the seed draws a cause or a healthy
// look-alike among the embedded drill scenarios (scenarios/drill/*.yaml), the plateau step and the rank
// at fault, and the fleet simulator walks it at --ranks x --steps (default 1024 x 50,000); the detectors
// read the same run in the background. --scenario FILE drills one scenario file; --from DIR one of the
// runs `flatline score --out DIR` recorded. Commands come from the terminal, or one per line from
// --answers FILE or a non-terminal stdin (scripted mode, echoed).
// Exit status: 0 for a right answer, 1 for a wrong or missing one, 2 when there is no run to drill (or
// the picked run's manifest, its hidden truth, cannot be read: never taken as "healthy").
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <random>

#include "cli/command.h"
#include "cli/embedded.h"
#include "report/drill.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string from, scenario, answers;
  int64_t seed = -1;
  DrillShape shape;
  bool explain = false, shape_given = false;
};

int drill(const Args& a) {
  const uint64_t seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}() % 100000;
  DrillRun run;
  if (!a.from.empty()) {
    if (a.shape_given) throw ScenarioError("--ranks and --steps shape a simulated run, not one recorded under --from");
    std::vector<std::string> dirs;
    try {
      dirs = recorded_drill_dirs(a.from);
    } catch (const std::exception& e) {
      std::cerr << "flatline drill: " << e.what() << "\n";
    }
    if (dirs.empty()) {
      std::cerr << fmt::format("flatline drill: no recorded runs with a manifest.json in {}.\nRecord some first:\n"
                               "  flatline score --out runs              # the embedded suite, then\n"
                               "  flatline drill --from runs\n"
                               "or drill a simulated fleet run: flatline drill\n", a.from);
      return 2;
    }
    const size_t pick = drill_pick(dirs.size(), seed);
    try {
      run = recorded_drill(dirs[pick]);
    } catch (const DrillTruthError& e) {
      std::cerr << fmt::format("flatline drill: {}: record the run again (flatline score --out {})\n", e.what(), a.from);
      return 2;
    }
    run.origin = fmt::format("the run: recorded, run {} of {} under {}, drawn by seed {}", pick + 1, dirs.size(),
                             a.from, seed);
    for (const auto& w : run.warnings) std::cerr << "warning: " << w << "\n";
  } else {
    const DrillPlan plan = a.scenario.empty() ? plan_drill(drill_scenarios(), seed, a.shape)
                                              : plan_drill_of({a.scenario, read_text_file(a.scenario)}, seed, a.shape);
    std::cout << fmt::format("simulating {} ranks x {} steps ...", a.shape.ranks, a.shape.steps) << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    run = simulate_drill(plan, seed);
    std::cout << fmt::format(" {:.1f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::cout << run.origin << fmt::format(" (replay this drill with --seed {})\n", seed) << std::flush;
  auto t0 = std::chrono::steady_clock::now();
  Drill d(std::move(run), [t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }, DrillOptions{a.explain});
  if (!a.answers.empty()) {
    std::ifstream in(a.answers);
    if (!in) {
      std::cerr << "flatline drill: cannot read " << a.answers << "\n";
      return 2;
    }
    return run_drill(d, in, std::cout, true);
  }
  return run_drill(d, std::cin, std::cout, !isatty(STDIN_FILENO));
}

FLATLINE_COMMAND("drill", "the interview question \"loss went flat at step 40k\" on a hidden run", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("--seed", a->seed, "draws the cause, the plateau step and the rank (default: random, printed)");
  auto* r = sub.add_option("--ranks", a->shape.ranks, "simulated ranks (default 1024)")
                ->check(CLI::Range(kDrillMinRanks, 1 << 16));
  auto* s = sub.add_option("--steps", a->shape.steps, "simulated steps (default 50000)")
                ->check(CLI::Range(kDrillMinSteps, int64_t{10000000}));
  sub.add_option("--scenario", a->scenario, "simulate this scenario file instead of drawing a drill scenario");
  sub.add_option("--from", a->from, "drill a recorded run: a run directory or a directory of runs (flatline score --out)")
      ->excludes("--scenario");
  sub.add_option("--answers", a->answers, "scripted mode: one command per line");
  sub.add_flag("--explain", a->explain, "after the answer, walk the checklist on this run: what each check showed, "
                                        "and why it rules its cause in or out");
  return [=] {
    a->shape_given = r->count() > 0 || s->count() > 0;
    return drill(*a);
  };
});

}  // namespace
}  // namespace flatline::cli
