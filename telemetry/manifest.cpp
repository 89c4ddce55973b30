#include "telemetry/manifest.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace flatline {

using nlohmann::json;

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
    json jf = {{"kind", f.kind}, {"mode", f.mode}, {"rank", f.rank}, {"active_from", f.active_from},
               {"onset_step", f.onset_step}};
    if (std::isfinite(f.onset_t)) jf["onset_t"] = f.onset_t;
    j["faults"].push_back(jf);
  }
  j["status"] = m.status;
  if (!m.error.empty()) j["error"] = m.error;
  j["wall_s"] = m.wall_s;
  j["resolved_scenario"] = m.resolved_yaml;
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error(path + ": cannot write manifest");
    out << j.dump(2) << "\n";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error(path + ": cannot rename manifest");
}

Manifest read_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open manifest");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(path + ": not a JSON object");
  Manifest m;
  try {
    m.scenario = j.at("scenario").get<std::string>();
    m.source = j.value("source", "");
    m.seed = j.value("seed", uint64_t{0});
    m.world_size = j.value("world_size", 1);
    m.steps = j.value("steps", int64_t{0});
    m.versions = j.value("versions", "");
    if (j.contains("expect")) {
      const auto& e = j["expect"];
      m.expect_cause = e.value("cause", "healthy");
      m.expect_rank = e.value("rank", -1);
      m.expect_within_steps = e.value("within_steps", int64_t{5});
    }
    for (const auto& f : j.value("faults", json::array())) {
      ManifestFault mf;
      mf.kind = f.at("kind").get<std::string>();
      mf.mode = f.value("mode", "");
      mf.rank = f.value("rank", -1);
      mf.active_from = f.value("active_from", int64_t{-1});
      mf.onset_step = f.value("onset_step", int64_t{-1});
      mf.onset_t = f.value("onset_t", std::numeric_limits<double>::quiet_NaN());
      m.faults.push_back(mf);
    }
    m.status = j.value("status", "running");
    m.error = j.value("error", "");
    m.wall_s = j.value("wall_s", 0.0);
    m.resolved_yaml = j.value("resolved_scenario", "");
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": bad manifest field: " + e.what());
  }
  return m;
}

}  // namespace flatline
