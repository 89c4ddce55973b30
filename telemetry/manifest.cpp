#include "telemetry/manifest.h"

#include "core/atomic_file.h"
#include "core/input_file.h"
#include "core/safe_path.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace flatline {

using nlohmann::json;

bool Manifest::failure_expected() const {
  for (const auto& f : faults)
    if (f.ends_run) return true;
  return false;
}

void write_manifest(const Manifest& m, const std::string& path) {
  json j;
  j["scenario"] = m.scenario;
  j["source"] = m.source;
  j["seed"] = m.seed;
  j["world_size"] = m.world_size;
  j["steps"] = m.steps;
  j["versions"] = m.versions;
  j["expect"] = {{"cause", m.expect_cause}, {"rank", m.expect_rank}, {"within_steps", m.expect_within_steps}};
  j["faults"] = json::array();
  for (const auto& f : m.faults) {
    json jf = {{"kind", f.kind}, {"cause", f.cause_id()}, {"mode", f.mode}, {"rank", f.rank},
               {"active_from", f.active_from}, {"onset_step", f.onset_step}};
    if (std::isfinite(f.onset_t)) jf["onset_t"] = f.onset_t;
    if (f.at_resume) jf["at_resume"] = true;
    if (f.ends_run) jf["ends_run"] = true;
    if (f.onset_at_start) jf["onset_at_start"] = true;
    j["faults"].push_back(jf);
  }
  j["status"] = m.status;
  if (!m.error.empty()) j["error"] = m.error;
  j["wall_s"] = m.wall_s;
  j["resolved_scenario"] = m.resolved_yaml;
  // `error` may quote raw bytes from a failing rank: replace invalid UTF-8 rather than throw. Atomic and
  // checked (core/atomic_file.h): a full disk keeps the previous manifest and says so.
  write_file_atomic(path, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n", "the manifest");
}

namespace {

// Reads one optional field (absent or null: `def`); a wrong type throws naming the file and the field.
template <class T>
T field(const json& o, const char* key, T def, const std::string& where, const std::string& path) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw ManifestError(path + ": bad manifest field '" + where + key + "': got " + it->dump());
  }
}

std::string required_string(const json& o, const char* key, const std::string& where, const std::string& path) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string())
    throw ManifestError(path + ": bad manifest field '" + where + key + "': " +
                             (it == o.end() ? std::string("missing") : "expected a string, got " + it->dump()));
  return it->get<std::string>();
}

// An identifier of the cause table or the fault catalogue ("lr_zero", "schedule_total_too_short"): what
// a manifest may name as a kind, a cause or a mode, and nothing a report or a terminal could take for
// markup or control.
void check_identifier(const std::string& v, const std::string& field, const std::string& path, bool empty_ok) {
  if (v.empty() && empty_ok) return;
  bool ok = !v.empty() && v.size() <= 64;
  for (char c : v) ok &= std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  if (!ok)
    throw ManifestError(path + ": bad manifest field '" + field + "': expected an identifier (letters, digits, '_', "
                        "'-', '.'; at most 64), got " + json(v).dump(-1, ' ', true, json::error_handler_t::replace));
}

}  // namespace

Manifest read_manifest(const std::string& path) {
  const std::string text = read_input_file(path, kMaxSmallFileBytes, "the manifest");
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ManifestError(path + ": not a JSON object");
  Manifest m;
  m.scenario = required_string(j, "scenario", "", path);
  // The scenario's name names the run's directory (and the re-enactment's): one path component.
  check_path_component(m.scenario, "bad manifest field 'scenario'", path);
  m.source = field<std::string>(j, "source", "", "", path);
  m.seed = field<uint64_t>(j, "seed", 0, "", path);
  // read wide, then bounded: a 2^32 + 2 read as int would wrap to 2
  const int64_t world_size = field<int64_t>(j, "world_size", 1, "", path);
  if (world_size < 1 || world_size > kMaxWorldSize)
    throw ManifestError(path + ": bad manifest field 'world_size': " + std::to_string(world_size) + " (expected 1.." +
                        std::to_string(kMaxWorldSize) + ")");
  m.world_size = static_cast<int>(world_size);
  m.steps = field<int64_t>(j, "steps", 0, "", path);
  if (m.steps < 0 || m.steps > kMaxSteps)
    throw ManifestError(path + ": bad manifest field 'steps': " + std::to_string(m.steps) + " (expected 0.." +
                        std::to_string(kMaxSteps) + ")");
  m.versions = field<std::string>(j, "versions", "", "", path);
  if (auto e = j.find("expect"); e != j.end() && !e->is_null()) {
    if (!e->is_object()) throw ManifestError(path + ": bad manifest field 'expect': got " + e->dump());
    m.expect_cause = field<std::string>(*e, "cause", "healthy", "expect.", path);
    const int64_t expect_rank = field<int64_t>(*e, "rank", -1, "expect.", path);
    m.expect_within_steps = field<int64_t>(*e, "within_steps", 5, "expect.", path);
    check_identifier(m.expect_cause, "expect.cause", path, false);
    if (expect_rank < -1 || expect_rank >= m.world_size)
      throw ManifestError(path + ": bad manifest field 'expect.rank': " + std::to_string(expect_rank) +
                          " (world size " + std::to_string(m.world_size) + ")");
    m.expect_rank = static_cast<int>(expect_rank);
  }
  if (auto fs = j.find("faults"); fs != j.end() && !fs->is_null()) {
    if (!fs->is_array()) throw ManifestError(path + ": bad manifest field 'faults': got " + fs->dump());
    if (fs->size() > 1024)
      throw ManifestError(path + ": bad manifest field 'faults': " + std::to_string(fs->size()) + " faults (at most 1024)");
    for (size_t i = 0; i < fs->size(); ++i) {
      const json& f = (*fs)[i];
      const std::string where = "faults[" + std::to_string(i) + "].";
      if (!f.is_object()) throw ManifestError(path + ": bad manifest field '" + where + "': got " + f.dump());
      FaultTruth mf;
      mf.kind = required_string(f, "kind", where, path);
      mf.cause = field<std::string>(f, "cause", mf.kind, where, path);
      mf.mode = field<std::string>(f, "mode", "", where, path);
      const int64_t rank = field<int64_t>(f, "rank", -1, where, path);
      mf.active_from = field<int64_t>(f, "active_from", -1, where, path);
      mf.onset_step = field<int64_t>(f, "onset_step", -1, where, path);
      mf.onset_t = field<double>(f, "onset_t", std::numeric_limits<double>::quiet_NaN(), where, path);
      mf.at_resume = field<bool>(f, "at_resume", false, where, path);
      mf.ends_run = field<bool>(f, "ends_run", false, where, path);
      mf.onset_at_start = field<bool>(f, "onset_at_start", false, where, path);
      check_identifier(mf.kind, where + "kind", path, false);
      check_identifier(mf.cause, where + "cause", path, true);
      check_identifier(mf.mode, where + "mode", path, true);
      if (rank < -1 || rank >= m.world_size)
        throw ManifestError(path + ": bad manifest field '" + where + "rank': " + std::to_string(rank) +
                            " (world size " + std::to_string(m.world_size) + ")");
      mf.rank = static_cast<int>(rank);
      m.faults.push_back(mf);
    }
  }
  m.status = field<std::string>(j, "status", "running", "", path);
  m.error = field<std::string>(j, "error", "", "", path);
  m.wall_s = field<double>(j, "wall_s", 0.0, "", path);
  m.resolved_yaml = field<std::string>(j, "resolved_scenario", "", "", path);
  return m;
}

}  // namespace flatline
