// Where a drill's run comes from (report/drill_run.h): a drill scenario drawn by the seed and simulated,
// or a recorded run directory.
#include "report/drill_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "faults/scenario_file.h"
#include "run/causes.h"
#include "faults/fault.h"
#include "report/run_data.h"
#include "sim/simulate/model.h"
#include "sim/simulate/sinks.h"
#include "sim/simulate/simulator.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace {

using simdetail::mix;  // splitmix64's finaliser, the simulator's (sim/simulate/model.h)
// Independent draws of one seed: the cause is drill_pick(n, seed) itself (so a seed picks the same
// recorded run as before), the others use streams of it.
enum Stream : uint64_t { kFile = 1, kPlateau = 2, kRank = 3 };
uint64_t draw(uint64_t seed, Stream s) { return mix(seed ^ mix(0x5eed0000ULL + s)); }

constexpr double kPlateauLo = 0.6, kPlateauSpan = 0.2;  // P in [0.6, 0.8) x steps

void check_shape(const DrillShape& d) {
  if (d.ranks < kDrillMinRanks)
    throw ScenarioError(fmt::format("--ranks {}: a drill needs at least {} ranks", d.ranks, kDrillMinRanks));
  if (d.steps < kDrillMinSteps)
    throw ScenarioError(fmt::format("--steps {}: a drill needs at least {} steps", d.steps, kDrillMinSteps));
}

DrillPlan plan_for(const Scenario& s, uint64_t seed, const DrillShape& shape) {
  check_shape(shape);
  DrillPlan p;
  p.source = s.source;
  p.cause = s.expect.cause;
  const double u = simdetail::unif(draw(seed, kPlateau));
  p.plateau_step = static_cast<int64_t>(static_cast<double>(shape.steps) * (kPlateauLo + kPlateauSpan * u));
  const int rank = static_cast<int>(drill_pick(static_cast<size_t>(shape.ranks), draw(seed, kRank)));
  p.scenario = drill_variant(s, shape, p.plateau_step, rank);
  p.scenario.seed = seed;
  return p;
}

}  // namespace

size_t drill_pick(size_t n, uint64_t seed) { return n ? static_cast<size_t>(mix(seed) % n) : 0; }

Scenario drill_variant(const Scenario& s, const DrillShape& shape, int64_t plateau, int fault_rank) {
  Scenario v = s;
  const double k = static_cast<double>(shape.steps) / static_cast<double>(s.steps);
  auto scale = [k](int64_t x) { return std::max<int64_t>(1, std::llround(static_cast<double>(x) * k)); };
  v.world_size = shape.ranks;
  v.steps = shape.steps;
  if (v.checkpoint_every > 0) v.checkpoint_every = scale(v.checkpoint_every);
  if (v.eval_every > 0) v.eval_every = scale(v.eval_every);
  v.schedule.warmup = std::llround(static_cast<double>(v.schedule.warmup) * k);
  v.schedule.total = scale(v.schedule.total);
  int64_t anchor = v.restart_at > 0 ? v.restart_at : INT64_MAX;
  for (const auto& f : v.faults) anchor = std::min(anchor, f.at > 0 ? f.at : f.range_start);
  auto move = [&](int64_t x) { return plateau + std::llround(static_cast<double>(x - anchor) * k); };
  if (anchor != INT64_MAX) {
    if (v.restart_at > 0) v.restart_at = move(v.restart_at);
    for (auto& f : v.faults) {
      if (f.at > 0) f.at = move(f.at);
      if (f.range_start > 0) f.range_start = move(f.range_start), f.range_end = move(f.range_end);
    }
  }
  for (auto& f : v.faults)
    if (f.target_rank >= 0) f.target_rank = fault_rank;
  if (v.expect.rank >= 0) v.expect.rank = fault_rank;
  // Through the loader and the fault registry again: the variant must be a scenario they accept.
  Scenario out = load_scenario_text(to_yaml(v), fmt::format("{} (drill variant: {} ranks, {} steps, plateau at step {})",
                                                            s.source, shape.ranks, shape.steps, plateau));
  make_faults(out);
  return out;
}

DrillPlan plan_drill(const std::vector<ScenarioText>& scenarios, uint64_t seed, const DrillShape& shape) {
  std::vector<Scenario> loaded;
  for (const auto& [source, text] : scenarios) loaded.push_back(load_scenario_text(text, source));
  if (loaded.empty()) throw ScenarioError("no drill scenarios to draw from");
  std::vector<std::string> causes;  // in cause-table order: the checklist's, then healthy
  for (const auto& id : cause_ids())
    if (std::any_of(loaded.begin(), loaded.end(), [&](const Scenario& s) { return s.expect.cause == id; }))
      causes.push_back(id);
  const std::string& cause = causes[drill_pick(causes.size(), seed)];
  std::vector<const Scenario*> of;
  for (const auto& s : loaded)
    if (s.expect.cause == cause) of.push_back(&s);
  DrillPlan p = plan_for(*of[drill_pick(of.size(), draw(seed, kFile))], seed, shape);
  p.causes = causes.size();
  p.files = loaded.size();
  return p;
}

DrillPlan plan_drill_of(const ScenarioText& scenario, uint64_t seed, const DrillShape& shape) {
  DrillPlan p = plan_for(load_scenario_text(scenario.second, scenario.first), seed, shape);
  p.causes = p.files = 1;
  return p;
}

bool DrillRun::detectors_ready() const {
  return diagnosis.valid() && diagnosis.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

std::string drill_prompt(int64_t step) {
  const std::string at = step < 0       ? ""
                         : step >= 10000 ? fmt::format(" at step {}k", (step + 500) / 1000)
                                         : fmt::format(" at step {}", step);
  return fmt::format("\"Training loss went flat{} after descending normally. Walk me through how you debug it.\"", at);
}

DrillRun simulate_drill(const DrillPlan& plan, uint64_t seed, std::launch detectors) {
  const Scenario s = plan.scenario;
  DrillRun run;
  auto summary = std::make_shared<RunSummary>(s.world_size);
  const auto t0 = std::chrono::steady_clock::now();
  const SimResult r = simulate(s, SimOptions{}, *summary);
  run.manifest = simulation_manifest(s, r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  run.summary = summary;
  // The same telemetry again (same scenario and seed: identical records), into the detectors.
  run.diagnosis = std::async(detectors, [s] {
                    DetectorConfig cfg;
                    cfg.world_size = s.world_size;
                    Triage t(cfg);
                    TriageSink sink(t);
                    simulate(s, SimOptions{}, sink);
                    return t.diagnosis();
                  }).share();
  run.name = s.name;
  run.dir = plan.source;
  run.prompt = drill_prompt(plan.plateau_step);
  run.origin = plan.files > 1
                   ? fmt::format("the run: simulated by the fleet simulator (no training), {} ranks x {} steps, drawn "
                                 "by seed {} from {} drill scenarios of {} causes and look-alikes",
                                 s.world_size, s.steps, seed, plan.files, plan.causes)
                   : fmt::format("the run: simulated by the fleet simulator (no training) from {}, {} ranks x {} "
                                 "steps, seed {}",
                                 plan.source, s.world_size, s.steps, seed);
  return run;
}

std::vector<std::string> recorded_drill_dirs(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& d : find_run_dirs(dir))
    if (std::filesystem::exists(d + "/manifest.json")) out.push_back(d);
  return out;
}

DrillRun recorded_drill(const std::string& dir) {
  DrillRun run;
  run.dir = dir;
  run.name = std::filesystem::path(dir).lexically_normal().filename().string();
  const std::string mpath = dir + "/manifest.json";
  if (std::filesystem::exists(mpath)) {
    try {  // a manifest it cannot read is an error, not a healthy truth
      run.manifest = read_manifest(mpath);
    } catch (const std::exception& e) {
      throw DrillTruthError(fmt::format("{} holds the run's hidden truth, and it cannot be read ({})", mpath, e.what()));
    }
    if (!run.manifest->scenario.empty()) run.name = run.manifest->scenario;
  }
  const auto files = telemetry_files(dir);
  if (files.empty()) throw std::runtime_error(dir + ": no telemetry (*.jsonl) found");
  auto summary = std::make_shared<RunSummary>(static_cast<int>(files.size()));
  DetectorConfig cfg;
  cfg.world_size = static_cast<int>(files.size());
  Triage tri(cfg);
  double last_t = 0;
  for (const auto& f : files)  // one rank file at a time, as `flatline diagnose` feeds them
    for (const auto& r : read_jsonl(f, &run.warnings)) {
      summary->write(r);
      tri.observe(r);
      if (std::isfinite(r.t)) last_t = std::max(last_t, r.t);
    }
  tri.finish(last_t);
  summary->end(last_t);
  std::promise<Diagnosis> done;
  const Diagnosis d = tri.diagnosis();
  done.set_value(d);
  run.diagnosis = done.get_future().share();
  run.summary = summary;
  run.prompt = drill_prompt(d.plateau.known && d.plateau.flat ? d.plateau.flat_since : -1);
  return run;
}

}  // namespace flatline
