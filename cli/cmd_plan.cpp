// `flatline plan SCENARIO [--manifest RUN_DIR]`: the scenario's plan as JSON on stdout
// (faults/plan_json.h), what the Python probe reads to inject the faults into a user's own training
// (docs/DESIGN.md §16). `flatline run` / `score` write it to <run dir>/plan.json themselves; this is
// for a job started some other way (torchrun ... train.py with FLATLINE_SCENARIO set).
// --manifest RUN_DIR: after such a job, writes RUN_DIR/manifest.json, the ground truth `flatline score
// --recorded` and `diagnose` read: each fault's truth from the same rules as the harness, its onset in
// run time from the ranks' telemetry (OnsetClock), the status from their last events.
// Exit status: 0; 2 for a bad scenario, or a run directory without telemetry.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "faults/effects.h"
#include "faults/fault.h"
#include "faults/plan_json.h"
#include "faults/scenario_file.h"
#include "telemetry/jsonl.h"
#include "telemetry/manifest.h"
#include "telemetry/record.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string scenario, manifest_dir;
};

int write_recorded_manifest(const Scenario& s, const std::string& dir) {
  Manifest m = scenario_manifest(s, fmt::format("flatline {}; an external trainer under another launcher",
                                                FLATLINE_VERSION));
  OnsetClock onsets(RunPlan(s).truths());
  m.status = "completed";
  double t_end = 0;
  for (int r = 0; r < s.world_size; ++r) {
    const std::string file = fmt::format("{}/telemetry/rank-{}.jsonl", dir, r);
    if (!std::filesystem::exists(file)) {
      std::cerr << fmt::format("flatline plan --manifest: {}: no telemetry of rank {} (world_size {})\n", file, r,
                               s.world_size);
      return 2;
    }
    std::vector<std::string> warnings;
    const std::vector<Record> records = read_jsonl(file, &warnings);
    for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
    for (const auto& rec : records) {
      onsets.observe(rec);
      t_end = std::max(t_end, rec.t);
    }
    if (records.empty()) continue;
    const Record& last = records.back();
    if (last.kind == RecordKind::event && last.name == event::interrupted) m.status = "interrupted";
    if (last.kind == RecordKind::event && last.name == event::error && m.status != "interrupted") {
      m.status = "failed";
      if (m.error.empty()) m.error = fmt::format("rank {}: {}", r, last.detail);
    } else if (!(last.kind == RecordKind::event && last.name == event::run_end) && m.status == "completed") {
      m.status = "failed";
      m.error = fmt::format("rank {}: its telemetry ends without run_end (step {})", r, last.step);
    }
  }
  for (size_t i = 0; i < m.faults.size(); ++i) m.faults[i].onset_t = onsets.onset_t(i);
  m.wall_s = t_end;
  write_manifest(m, dir + "/manifest.json");
  std::cout << fmt::format("{}/manifest.json: {} ({} fault(s))\n", dir, m.status, m.faults.size());
  return 0;
}

int run(const Args& a) {
  const Scenario s = load_scenario_text(read_text_file(a.scenario), a.scenario);
  if (!a.manifest_dir.empty()) return write_recorded_manifest(s, a.manifest_dir);
  std::cout << plan_json(s);
  return 0;
}

FLATLINE_COMMAND("plan", "a scenario's fault plan as JSON, for the Python probe in your own training", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenario", a->scenario, "scenario YAML file")->required();
  sub.add_option("--manifest", a->manifest_dir,
                 "after a job run under another launcher: write RUN_DIR/manifest.json (the ground truth)");
  return [a] { return run(*a); };
});

}  // namespace
}  // namespace flatline::cli
