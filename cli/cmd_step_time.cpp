// `flatline step-time SCENARIO [--steps N] [--threads T]`: median wall time of one optimizer step of the
// scenario's model on one rank (data, forward, backward, clip, AdamW), no telemetry, no collectives.
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "faults/scenario_file.h"
#include "sim/build_info.h"
#include "sim/trainer.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string scenario;
  int steps = 10, threads = 1;
  PlacementArgs placement;
};

FLATLINE_COMMAND("step-time", "median ms per optimizer step of the scenario's model, one rank", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenario", a->scenario, "scenario YAML file")->required();
  sub.add_option("--steps", a->steps, "steps to time after one warm-up step (default 10)")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--threads", a->threads, "intra-op threads (default 1)")->check(CLI::Range(1, 1024));
  a->placement.add(sub);
  return [a] {
    Scenario s = load_scenario_file(a->scenario);
    a->placement.apply(s);
    std::cout << fmt::format("{}: {:.2f} ms/step (median of {}, {} threads, {})\n", s.name,
                             measure_step_ms(s, a->steps, a->threads), a->steps, a->threads, placement_info(s));
    return 0;
  };
});

}  // namespace
}  // namespace flatline::cli
