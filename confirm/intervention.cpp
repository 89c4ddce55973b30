// The registry of repairs and the RepairSpec's JSON (confirm/intervention.h).
#include "confirm/intervention.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/check.h"
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
  auto field = [&](const char* name, auto& out, bool required) {
    auto it = j.find(name);
    if (it == j.end()) {
      if (required) throw std::runtime_error(fmt::format("{}: missing \"{}\"", source, name));
      return;
    }
    try {
      it->get_to(out);
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(fmt::format("{}: \"{}\" has the wrong type ({})", source, name, it->type_name()));
    }
  };
  field("cause", r.cause, true);
  field("rank", r.rank, false);
  field("from_step", r.from_step, true);
  field("lr_before", r.lr_before, false);
  for (const auto& [k, _] : j.items())
    if (k != "cause" && k != "rank" && k != "from_step" && k != "lr_before")
      throw std::runtime_error(fmt::format("{}: unknown field \"{}\" (expected cause, rank, from_step, lr_before)", source, k));
  return r;
}

}  // namespace flatline
