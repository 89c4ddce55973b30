// `flatline export RUN_DIR --formats LIST --out DIR [--every N]`: writes a recorded run's telemetry as
// the logs real frameworks write (telemetry/writers/writer.h: TensorBoard, trainer_state.json,
// Megatron, DeepSpeed, Lightning metrics.csv, W&B history), from rank 0's records, into
// DIR/formats/<format>/, exactly as a live run with those formats would have: to look at a run in
// TensorBoard, or to try a log-reading detector on it. Exit status: 0, or 2 when the run is unreadable.
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "faults/scenario_file.h"
#include "readers/reader.h"
#include "telemetry/writers/writer.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string run, out, formats;
  int every = 0;
};

int run_export(const Args& a) {
  std::vector<std::string> formats;
  for (size_t p = 0; p <= a.formats.size();) {
    size_t q = a.formats.find(',', p);
    if (q == std::string::npos) q = a.formats.size();
    if (q > p) formats.push_back(a.formats.substr(p, q - p));
    p = q + 1;
  }
  try {
    for (const auto& f : formats)
      if (!is_format_name(f)) throw std::invalid_argument("--formats: unknown format '" + f + "' (expected " + format_names() + ")");
    LogData log = read_log(a.run, "flatline");
    Scenario s;
    try {
      s = load_scenario_file(a.run + "/scenario.yaml");
    } catch (const ScenarioError&) {
      s.world_size = log.world_size;
    }
    if (a.every > 0) s.formats_every = a.every;
    FormatSink sink(formats, format_context(s, a.out, 0, false));
    size_t n = 0;
    for (const auto& r : log.records)
      if (r.rank == 0) sink.write(r), ++n;
    for (const auto& e : sink.errors()) std::cerr << "error: " << e << "\n";
    if (!sink.errors().empty()) {  // never "wrote" after its own write errors
      std::cerr << fmt::format("error: {}/formats/ is incomplete ({} write error(s) above)\n", a.out, sink.errors().size());
      return 1;
    }
    std::cout << fmt::format("wrote {} from {} rank-0 records into {}/formats/\n", a.formats, n, a.out);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

FLATLINE_COMMAND("export", "write a recorded run's telemetry as TensorBoard, HF, Megatron, ... logs", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("run", a->run, "recorded run directory")->required();
  sub.add_option("--formats", a->formats, "comma-separated: " + format_names())->required();
  sub.add_option("--out", a->out, "directory to write formats/<format>/ into")->required();
  sub.add_option("--every", a->every, "logging interval in steps (default: the run's scenario's, else 1)");
  return [a] { return run_export(*a); };
});

}  // namespace
}  // namespace flatline::cli
