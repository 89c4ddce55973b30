#include "faults/fault.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/registry.h"
#include "faults/scenario_file.h"
#include "run/causes.h"

namespace flatline {
namespace {

Registry<FaultKindDef>& registry() {
  static Registry<FaultKindDef> r("fault kind");
  return r;
}

// splitmix64: a seeded, platform-independent draw for `range` + `probability` onsets.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

const ParamDef* ModeDef::param(const std::string& n) const {
  for (const auto& p : params)
    if (p.name == n) return &p;
  return nullptr;
}

const ModeDef* FaultKindDef::mode(const std::string& m) const {
  for (const auto& d : modes)
    if (d.name == m) return &d;
  return nullptr;
}

void register_fault_kind(FaultKindDef def) {
  const std::string kind = def.kind;
  if (def.cause.empty()) def.cause = kind;
  const Cause* c = find_cause(def.cause);
  FLATLINE_CHECK(c && c->kind != CauseKind::verdict, "fault kind '{}' injects '{}', which is not a cause of the "
                 "cause table (run/causes.cpp)", kind, def.cause);
  registry().add(kind, std::move(def));
}

const FaultKindDef* find_fault_kind(const std::string& kind) { return registry().find(kind); }

std::vector<std::string> fault_kind_names() { return registry().names(); }

namespace {
const ParamDef& declared(const FaultSpec& f, const char* name, ParamType type) {
  const FaultKindDef* k = find_fault_kind(f.kind);
  const ModeDef* m = k ? k->mode(f.mode) : nullptr;
  const ParamDef* p = m ? m->param(name) : nullptr;
  FLATLINE_CHECK(p && p->type == type, "{}/{} reads parameter '{}' that its registration does not declare as {}",
                 f.kind, f.mode, name, type == ParamType::integer ? "an integer" : "a number");
  return *p;
}
}  // namespace

std::optional<int64_t> Fault::integer_param(const char* name) const {
  declared(spec_, name, ParamType::integer);
  auto it = spec_.params.find(name);
  if (it == spec_.params.end()) return std::nullopt;
  return static_cast<int64_t>(it->second);  // the loader checked it is a whole number
}

std::optional<double> Fault::number_param(const char* name) const {
  declared(spec_, name, ParamType::number);
  auto it = spec_.params.find(name);
  if (it == spec_.params.end()) return std::nullopt;
  return it->second;
}

void Fault::refuse(const std::string& why) const {
  throw ScenarioError(fmt::format("{}:{}: {}/{}: {}", scenario_.source, spec_.line, spec_.kind, spec_.mode, why));
}

Fault::Fault(FaultSpec spec, const Scenario& scenario) : spec_(std::move(spec)), scenario_(scenario) {
  if (spec_.at > 0) {
    onsets_.push_back(spec_.at);
  } else {
    for (int64_t s = spec_.range_start; s <= spec_.range_end; s += spec_.range_every) {
      double u = static_cast<double>(mix(scenario.seed * 1000003ULL + static_cast<uint64_t>(spec_.index + 1) * 7919ULL +
                                         static_cast<uint64_t>(s)) >> 11) / 9007199254740992.0;
      if (u < spec_.probability) onsets_.push_back(s);
    }
  }
}

bool Fault::active(int64_t step, int rank) const {
  if (!targets(rank)) return false;
  for (int64_t o : onsets_) {
    if (step < o) break;
    if (spec_.lifetime_steps < 0 || step < o + spec_.lifetime_steps) return true;
  }
  return false;
}

int64_t Fault::first_active_step() const { return onsets_.empty() ? -1 : onsets_.front(); }

FaultTruth Fault::truth() const {
  FaultTruth t;
  t.kind = spec_.kind;
  t.cause = find_fault_kind(spec_.kind)->cause;
  t.mode = spec_.mode;
  t.rank = spec_.target_rank;
  t.active_from = t.onset_step = first_active_step();
  return t;
}

int64_t resume_checkpoint_step(const Scenario& s) {
  if (s.restart_at < 0 || s.checkpoint_every <= 0) return -1;
  return s.restart_at / s.checkpoint_every * s.checkpoint_every;
}

Manifest scenario_manifest(const Scenario& s, const std::string& versions) {
  Manifest m;
  m.scenario = s.name;
  m.source = s.source;
  m.resolved_yaml = to_yaml(s);
  m.seed = s.seed;
  m.world_size = s.world_size;
  m.steps = s.steps;
  m.versions = versions;
  m.expect_cause = s.expect.cause;
  m.expect_rank = s.expect.rank;
  m.expect_within_steps = s.expect.within_steps;
  for (const auto& f : make_faults(s)) m.faults.push_back(f->truth());
  return m;
}

std::vector<std::unique_ptr<Fault>> make_faults(const Scenario& s) {
  std::vector<std::unique_ptr<Fault>> out;
  for (const auto& f : s.faults) {
    const FaultKindDef* k = find_fault_kind(f.kind);
    if (!k)
      throw ScenarioError(fmt::format("{}:{}: fault kind '{}' is not implemented in this build", s.source, f.line,
                                      f.kind));
    out.push_back(k->make(f, s));
  }
  return out;
}

void apply_all(const std::vector<std::unique_ptr<Fault>>& faults, Hook h, StepActions& a) {
  for (const auto& f : faults)
    if (f->active(a.step, a.rank)) f->apply(h, a);
}

}  // namespace flatline
