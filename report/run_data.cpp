// Loading recorded runs for the drill and the report: telemetry files, manifest, fresh diagnosis.
#include "report/run_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include <fstream>
#include <sstream>

#include "faults/scenario_file.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace fs = std::filesystem;

std::vector<std::string> telemetry_files(const std::string& dir) {
  std::error_code ec;
  const std::string tdir = fs::is_directory(dir + "/telemetry", ec) ? dir + "/telemetry" : dir;
  std::vector<std::string> files;
  if (!fs::is_directory(tdir, ec)) return files;
  for (const auto& e : fs::directory_iterator(tdir, ec))
    if (e.path().extension() == ".jsonl") files.push_back(e.path().string());
  // rank-2 before rank-10: shorter names first, then by name
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return files;
}

bool is_run_dir(const std::string& dir) { return !telemetry_files(dir).empty(); }

std::vector<std::string> find_run_dirs(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error(dir + ": not a directory");
  if (is_run_dir(dir)) return {dir};
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && is_run_dir(e.path().string())) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw std::runtime_error(dir + ": no run directories (with telemetry/rank-<r>.jsonl) found");
  return out;
}

Diagnosis diagnose_ranks(const std::vector<std::vector<Record>>& ranks) {
  DetectorConfig cfg;
  cfg.world_size = static_cast<int>(ranks.size());
  Triage tri(cfg);
  double last_t = 0;
  for (const auto& rank : ranks)
    for (const auto& r : rank) {
      tri.observe(r);
      if (std::isfinite(r.t)) last_t = std::max(last_t, r.t);
    }
  tri.finish(last_t);
  return tri.diagnosis();
}

RunData load_run(const std::string& dir) {
  RunData d;
  d.dir = dir;
  d.name = fs::path(dir).lexically_normal().filename().string();
  if (d.name.empty()) d.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  const auto files = telemetry_files(dir);
  if (files.empty()) throw std::runtime_error(dir + ": no telemetry (*.jsonl) found");
  for (const auto& f : files) d.ranks.push_back(read_jsonl(f, &d.warnings));
  const std::string mpath = dir + "/manifest.json";
  std::error_code ec;
  if (fs::exists(mpath, ec)) {
    try {
      d.manifest = read_manifest(mpath);
      if (!d.manifest->scenario.empty()) d.name = d.manifest->scenario;
    } catch (const std::exception& e) {
      d.warnings.push_back(e.what());
    }
  }
  d.diagnosis = diagnose_ranks(d.ranks);
  if (fs::exists(dir + "/confirm/confirm.json", ec)) {
    try {
      attach_confirmation(d, dir + "/confirm");
    } catch (const std::exception& e) {
      d.warnings.push_back(e.what());
    }
  }
  return d;
}

void attach_confirmation(RunData& run, const std::string& confirm_dir) {
  const std::string file = confirm_dir + "/confirm.json";
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  ConfirmationData c;
  c.result = confirm_from_json(text.str(), file);
  c.dir = confirm_dir;
  auto rank0 = [&](const char* name) {
    const std::string f = confirm_dir + "/" + name + "/telemetry/rank-0.jsonl";
    std::error_code ec;
    return fs::exists(f, ec) ? read_jsonl(f, &run.warnings) : std::vector<Record>{};
  };
  c.prefix = rank0("prefix");
  c.control = rank0("control");
  c.repaired = rank0("repaired");
  try {
    const Scenario s = load_scenario_file(run.dir + "/scenario.yaml");
    c.samples_per_step = static_cast<int64_t>(s.batch_size) * s.grad_accum;
  } catch (const std::exception&) {  // plotted by logged step
  }
  run.confirmation = std::move(c);
}

}  // namespace flatline
