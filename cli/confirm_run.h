// Runs a confirmation by counterfactual (docs/DESIGN.md §14, confirm/confirm.h) on a recorded run
// directory, for `flatline confirm` and `flatline score --confirm`. It reads the run's scenario.yaml, its
// diagnosis.json (or diagnoses its telemetry when it has none), its telemetry and its complete
// checkpoints — never manifest.json — plans the replays, trains them with the launcher (replay mode:
// no manifest, cli/launch.h) under OUT/prefix, OUT/control and OUT/repaired, judges them and writes
// OUT/confirm.json. A placement the run was recorded with (`--device`, `--process-group`) is given again:
// the manifest that names it is not read.
#pragma once
#include <optional>
#include <string>

#include "cli/command.h"
#include "confirm/confirm.h"

namespace flatline::cli {

struct ConfirmRunOptions {
  std::string out;                 // "": RUN_DIR/confirm (a previous confirmation there is replaced)
  ConfirmOptions confirm;
  PlacementArgs placement;         // none given: the scenario's
  int threads_per_rank = 0;
  bool progress = true;            // a line per replay as it starts
};

// Throws std::runtime_error (or ScenarioError) naming the file for a directory it cannot confirm: no
// scenario.yaml or telemetry, an unreadable diagnosis.json, an OUT that is not a confirmation's.
ConfirmResult confirm_run(const std::string& run_dir, const ConfirmRunOptions& o);

}  // namespace flatline::cli
