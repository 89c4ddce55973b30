// `flatline diagnose PATH [--format F]` (F: auto or a reader's name, readers/reader.h):
// reads recorded telemetry or a real training log (readers/reader.h: a flatline run directory or
// JSONL, trainer_state.json, a Megatron or DeepSpeed log, Lightning metrics.csv, a W&B history CSV,
// TensorBoard event files), runs the detectors and prints the diagnosis with its checklist: what
// fired, what passed, and what could not run and what to log to make it possible.
// Warnings (file:line or file: byte N) go to stderr; what is valid is still diagnosed.
// Exit status: 0 diagnosed (whatever the cause), 2 nothing readable.
#include <iostream>

#include "cli/command.h"
#include "readers/replay.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string path, format = "auto";
  bool json = false;
};

int diagnose(const Args& a) {
  try {
    LogStream log(a.path, parse_log_format(a.format));
    Diagnosis d = replay(log);
    for (const auto& w : log.warnings()) std::cerr << "warning: " << w << "\n";
    if (a.json) {
      std::cout << to_json(d) << "\n";
    } else {
      std::cout << "read " << log.records() << " records (" << log.format() << ") from " << log.files().size()
                << " file(s)\n";
      std::cout << to_text(d);
    }
    return 0;
  } catch (const std::exception& e) {  // ReadError, or a bad --format
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

FLATLINE_COMMAND("diagnose", "diagnose recorded telemetry or a training log (run dir, JSONL, HF, Megatron, ...)",
                 [](CLI::App& sub) {
                   auto a = std::make_shared<Args>();
                   sub.add_option("path", a->path, "run directory, log file or log directory")->required();
                   sub.add_option("--format", a->format, format_choices() + " (default auto)");
                   sub.add_flag("--json", a->json, "print the diagnosis as one JSON object");
                   return [a] { return diagnose(*a); };
                 });

}  // namespace
}  // namespace flatline::cli
