#include "faults/fault.h"

#include <fmt/format.h>

#include <map>

namespace flatline {
namespace {

std::map<std::string, FaultFactory>& registry() {
  static std::map<std::string, FaultFactory> r;
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

void register_fault(const std::string& kind, FaultFactory f) { registry()[kind] = std::move(f); }

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
  for (const auto& f : make_faults(s)) {
    FaultTruth t = f->truth();
    m.faults.push_back({t.kind, t.mode, t.rank, t.active_from, t.onset_step});
  }
  return m;
}

std::vector<std::unique_ptr<Fault>> make_faults(const Scenario& s) {
  std::vector<std::unique_ptr<Fault>> out;
  for (const auto& f : s.faults) {
    auto it = registry().find(f.kind);
    if (it == registry().end())
      throw ScenarioError(fmt::format("{}:{}: fault kind '{}' is not implemented in this build", s.source, f.line,
                                      f.kind));
    out.push_back(it->second(f, s));
  }
  return out;
}

void apply_all(const std::vector<std::unique_ptr<Fault>>& faults, Hook h, StepActions& a) {
  for (const auto& f : faults)
    if (f->active(a.step, a.rank)) f->apply(h, a);
}

}  // namespace flatline
