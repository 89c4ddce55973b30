// The registry of repairs and the RepairSpec's JSON (faults/intervention.h).
#include "faults/intervention.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/check.h"
#include "core/json_field.h"
#include "core/registry.h"
#include "run/causes.h"

namespace flatline {
namespace {

Registry<InterventionFactory>& registry() {
  static Registry<InterventionFactory> r("a repair for");
  return r;
}

}  // namespace

void register_intervention(const std::string& cause, InterventionFactory make) {
  const Cause* c = find_cause(cause);
  FLATLINE_CHECK(c && c->kind == CauseKind::checklist,
                 "a repair registered for '{}', which is not a checklist cause of the cause table (run/causes.cpp)",
                 cause);
  registry().add(cause, std::move(make));
}

std::vector<std::string> intervention_causes() { return registry().names(); }

bool has_intervention(const std::string& cause) { return registry().has(cause); }

std::unique_ptr<Intervention> make_intervention(const RepairSpec& spec, const Scenario& s) {
  const InterventionFactory* make = registry().find(spec.cause);
  if (!make)
    throw std::invalid_argument(fmt::format("no repair for '{}' (repairs exist for: {})", spec.cause,
                                            join_ids(intervention_causes(), ", ")));
  return (*make)(spec, s);
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
