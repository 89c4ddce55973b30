// Detector suite throughput on simulated telemetry (docs/DESIGN.md §11): records/s of a whole Triage (the five
// checklist detectors, straggler, plateau) on a pre-generated trace, so the simulator's own cost is
// excluded. Readers: bench_readers.cpp. Numbers: bench/README.md.
#include <benchmark/benchmark.h>
#include <fmt/format.h>


#include <map>
#include <string>
#include <vector>

#include "detectors/triage.h"
#include "faults/scenario_file.h"
#include "sim/simulate/sinks.h"
#include "sim/simulate/simulator.h"

namespace {
using namespace flatline;

struct Keep : RecordSink {
  std::vector<Record> v;
  void write(const Record& r) override { v.push_back(r); }
};

const std::vector<Record>& trace(int ranks, int64_t steps) {
  static std::map<std::pair<int, int64_t>, Keep> cache;
  Keep& k = cache[{ranks, steps}];
  if (k.v.empty()) {
    SimOptions o;
    o.ranks = ranks;
    o.steps = steps;
    const Scenario s = resolve_for_simulation(
        load_scenario_file(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/fleet/healthy.yaml"), o);
    simulate(s, o, k);
  }
  return k.v;
}

void BM_TriageRecords(benchmark::State& st) {
  const int ranks = static_cast<int>(st.range(0));
  const auto& recs = trace(ranks, st.range(1));
  for (auto _ : st) {
    DetectorConfig cfg;
    cfg.world_size = ranks;
    Triage t(cfg);
    for (const Record& r : recs) t.observe(r);
    t.finish(0);
    benchmark::DoNotOptimize(t.diagnosis());
  }
  st.counters["records/s"] =
      benchmark::Counter(static_cast<double>(recs.size()) * st.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TriageRecords)->Args({64, 100})->Args({64, 2000})->Args({1024, 200})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
