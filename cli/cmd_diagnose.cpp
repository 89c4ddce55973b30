// `flatline diagnose RUN_DIR`: runs the detectors over recorded flatline telemetry (a run directory or
// a directory of rank-*.jsonl files) and prints the diagnosis. Malformed lines are reported as
// warnings with file:line and skipped; what is valid is still diagnosed.
#include <iostream>

#include "cli/command.h"
#include "cli/launch.h"

namespace flatline::cli {
namespace {

FLATLINE_COMMAND("diagnose", "diagnose recorded flatline telemetry (a run directory)", [](CLI::App& sub) {
  auto dir = std::make_shared<std::string>();
  sub.add_option("run_dir", *dir, "run directory or directory of rank-*.jsonl")->required();
  return [dir] {
    std::vector<std::string> warnings;
    Diagnosis d = diagnose_run_dir(*dir, 0, &warnings);
    for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
    std::cout << to_text(d);
    return 0;
  };
});

}  // namespace
}  // namespace flatline::cli
