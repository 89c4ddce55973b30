// The fleet simulator's step walk (simulator.h): the same order as sim/trainer.cpp's step (data,
// compute, all-reduce, optimizer, logging, eval, checkpoint, restart), with the faults' StepActions
// interpreted the way the trainer interprets them, for every rank at once.
#include "sim/simulate/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "run/loss_scaler.h"
#include "run/sampler.h"
#include "sim/simulate/model.h"
#include "sim/simulate/walk.h"

namespace flatline {

Scenario resolve_for_simulation(Scenario s, const SimOptions& o) {
  if (o.ranks > 0) s.world_size = o.ranks;
  if (o.steps > 0) s.steps = o.steps;
  if (o.override_seed) s.seed = o.seed;
  if (!(o.step_ms >= 0 && o.step_ms <= kMaxSimStepMs))  // NaN too
    throw ScenarioError(fmt::format("step_ms (--step-ms) {}: expected a median compute time in (0, {}] ms (0: the default {} ms)",
                                    o.step_ms, kMaxSimStepMs, simdetail::kDefaultComputeMs));
  for (const auto& f : s.faults) {
    if (f.target_rank >= s.world_size)
      throw ScenarioError(fmt::format("{}:{}: target rank {} is outside {} simulated ranks", s.source, f.line,
                                      f.target_rank, s.world_size));
    const int64_t first = f.at > 0 ? f.at : f.range_start;  // as the loader refuses it for `run`
    if (first > s.steps)
      throw ScenarioError(fmt::format("{}:{}: the fault starts at step {}, after the simulated run's last step {}",
                                      s.source, f.line, first, s.steps));
  }
  if (s.expect.rank >= s.world_size)
    throw ScenarioError(fmt::format("{}: expected rank {} is outside {} simulated ranks", s.source, s.expect.rank,
                                    s.world_size));
  return s;
}

SimResult simulate(const Scenario& sc, const SimOptions& o, RecordSink& sink) {
  simdetail::Walk w(sc, o, sink);
  return w.run();
}

}  // namespace flatline
