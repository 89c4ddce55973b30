// The registry of repairs and the RepairSpec's JSON (confirm/intervention.h).
#include "confirm/intervention.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/check.h"
#include "core/json_field.h"
#include "detectors/causes.h"

namespace flatline {
namespace {

std::map<std::string, InterventionFactory>& registry() {
  static std::map<std::string, InterventionFactory> r;
  return r;
}

}  // namespace

void register_intervention(const std::string& cause, InterventionFactory make) {
  FLATLINE_CHECK(!registry().count(cause), "a repair for '{}' registered twice", cause);
  const Cause* c = find_cause(cause);
  FLATLINE_CHECK(c && c->kind == CauseKind::checklist,
                 "a repair registered for '{}', which is not a checklist cause of the cause table (detectors/causes.cpp)",
                 cause);
  registry().emplace(cause, std::move(make));
}

std::vector<std::string> intervention_causes() {
  std::vector<std::string> out;
  for (const auto& [c, _] : registry()) out.push_back(c);
  return out;
}

bool has_intervention(const std::string& cause) { return registry().count(cause) > 0; }

std::unique_ptr<Intervention> make_intervention(const RepairSpec& spec, const Scenario& s) {
  auto it = registry().find(spec.cause);
  if (it == registry().end())
    throw std::invalid_argument(fmt::format("no repair for '{}' (repairs exist for: {})", spec.cause,
                                            join_ids(intervention_causes(), ", ")));
  return it->second(spec, s);
}

std::string to_json(const RepairSpec& r) {
  nlohmann::json j = {{"cause", r.cause}, {"rank", r.rank}, {"from_step", r.from_step}, {"lr_before", r.lr_before}};
  return j.dump();
}

RepairSpec repair_from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(fmt::format("{}: not JSON (byte {}): expected a repair object", source, e.byte));
  }
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object {\"cause\": ..., ...}");
  RepairSpec r;
  for (const char* required : {"cause", "from_step"})
    if (!j.contains(required)) throw std::runtime_error(fmt::format("{}: missing \"{}\"", source, required));
  json_field(j, "cause", r.cause, source);
  json_field(j, "rank", r.rank, source);
  json_field(j, "from_step", r.from_step, source);
  json_field(j, "lr_before", r.lr_before, source);
  for (const auto& [k, _] : j.items())
    if (k != "cause" && k != "rank" && k != "from_step" && k != "lr_before")
      throw std::runtime_error(fmt::format("{}: unknown field \"{}\" (expected cause, rank, from_step, lr_before)", source, k));
  return r;
}

}  // namespace flatline
