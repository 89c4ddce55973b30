// Re-enacted run directories for replays (cli/reenact.h).
#include "cli/reenact.h"

#include "core/safe_path.h"
#include "faults/scenario_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace flatline::cli {
namespace fs = std::filesystem;

std::vector<std::string> merged_formats(const Scenario& s, const std::vector<std::string>& extra) {
  std::vector<std::string> f = s.formats;
  for (const auto& x : extra)
    if (std::find(f.begin(), f.end(), x) == f.end()) f.push_back(x);
  return f;
}

std::vector<std::string> formats_of(const std::string& recorded_run, const std::vector<std::string>& extra) {
  // what the recording wrote (the scenario's, or --formats at the time), its scenario's, what is asked now
  Scenario s;
  try {
    s = load_scenario_file(recorded_run + "/scenario.yaml");
  } catch (const ScenarioError&) {  // a scenario this flatline no longer loads
  }
  std::vector<std::string> out;
  for (const auto& f : format_kinds())
    if (fs::is_directory(format_dir(recorded_run, f))) out.push_back(f);
  for (const auto& f : merged_formats(s, extra))
    if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  return out;
}

Reenactment::Reenactment(const std::string& scratch, const Manifest& m,
                         const std::vector<ExternalDetectorSpec>& detectors, const std::vector<std::string>& formats,
                         const std::string& recorded_run)
    : formats_(formats) {
  Scenario s;
  try {
    s = load_scenario_file(recorded_run + "/scenario.yaml");
  } catch (const ScenarioError&) {
    s.world_size = m.world_size;
    s.steps = m.steps;
  }
  for (const auto& d : detectors) {
    Dir dir;
    // Names from the command line and the manifest, each one path component (checked where they are
    // read, and here again), and the result inside the scratch directory: nothing outside it is made
    // or deleted (docs/DESIGN.md §9).
    check_path_component(d.name, "detector name", "--detector");
    check_path_component(m.scenario, "scenario name", recorded_run + "/manifest.json");
    dir.path = path_within(scratch, d.name + "/" + m.scenario, "the re-enactment of a run");
    make_owned_dir(dir.path);
    fs::create_directories(dir.path + "/telemetry");
    // a rank's file is opened with its first record: a manifest's world size opens nothing by itself
    dir.ranks.resize(static_cast<size_t>(std::max(1, m.world_size)));
    if (!formats.empty()) dir.formats = std::make_unique<FormatSink>(formats, format_context(s, dir.path, 0, false));
    dirs_.push_back(std::move(dir));
  }
}

Reenactment::~Reenactment() {
  for (auto& d : dirs_) {
    d.ranks.clear();  // closed before their directory goes
    d.formats.reset();
    remove_owned_dir(d.path);
  }
}

std::vector<std::string> Reenactment::run_dirs() const {
  std::vector<std::string> out;
  for (const auto& d : dirs_) out.push_back(d.path);
  return out;
}

std::vector<std::vector<std::pair<std::string, std::string>>> Reenactment::envs() const {
  std::vector<std::vector<std::pair<std::string, std::string>>> out;
  for (const auto& d : dirs_) out.push_back(format_env(d.path, formats_));
  return out;
}

void Reenactment::write(size_t detector, const Record& r) {
  Dir& d = dirs_.at(detector);
  if (r.rank >= 0 && static_cast<size_t>(r.rank) < d.ranks.size()) {
    auto& w = d.ranks[static_cast<size_t>(r.rank)];
    if (!w) w = std::make_unique<JsonlWriter>(fmt::format("{}/telemetry/rank-{}.jsonl", d.path, r.rank));
    w->write(r);
  }
  if (d.formats && r.rank == 0) d.formats->write(r);
}

}  // namespace flatline::cli
