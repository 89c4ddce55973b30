// `flatline detect`: the built-in detector suite as an external detector (docs/DETECTORS.md): reads
// telemetry records (JSON Lines) on stdin, runs them through the Triage, and writes one alarm line
// on stdout the moment each detector fires ({"cause", "rank", "evidence", "step"}), flushed before
// it reads the next record, so the harness's lock-step replay stamps it with the record that fired.
// FLATLINE_WORLD_SIZE (set by the harness) tells the detectors how many ranks to wait for. Lines
// that do not parse are reported on stderr (file:line) and skipped, as read_jsonl does.
// `flatline score --detector builtin='flatline detect'` must score exactly as the built-in suite.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "detectors/triage.h"
#include "telemetry/jsonl.h"

namespace flatline::cli {
namespace {

int detect() {
  DetectorConfig cfg;
  if (const char* w = std::getenv("FLATLINE_WORLD_SIZE")) cfg.world_size = std::max(0, std::atoi(w));
  Triage tri(cfg);
  tri.on_finding([](const Finding& f) {
    nlohmann::json a = {{"cause", f.cause}, {"evidence", f.evidence}, {"step", f.detected_step}};
    if (f.rank >= 0) a["rank"] = f.rank;
    std::cout << a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  });
  std::ios::sync_with_stdio(false);
  double last_t = 0;
  size_t line_no = 0;
  for (std::string line; std::getline(std::cin, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      Record r = parse_record(line, "<stdin>", line_no);
      if (std::isfinite(r.t)) last_t = std::max(last_t, r.t);
      tri.observe(r);
    } catch (const ParseError& e) {
      std::cerr << "warning: " << e.what() << "\n";
    }
  }
  tri.finish(last_t);
  return 0;
}

FLATLINE_COMMAND("detect", "the built-in detectors as an external detector: telemetry JSONL on stdin, alarms on stdout",
                 [](CLI::App& sub) { return [] { return detect(); }; });

}  // namespace
}  // namespace flatline::cli
