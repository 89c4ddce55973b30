// Detector suite and reader throughput on simulated telemetry (issue 5): records/s of a whole Triage
// (the five checklist detectors, straggler, plateau) on a pre-generated trace, so the simulator's own
// cost is excluded; and MB/s of the JSONL reader on the same trace written as rank files.
// Numbers: bench/README.md.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "detectors/triage.h"
#include "faults/scenario.h"
#include "sim/simulate/sinks.h"
#include "sim/simulate/simulator.h"
#include "telemetry/jsonl.h"

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

void BM_ReadJsonl(benchmark::State& st) {
  const int ranks = 8;
  const auto& recs = trace(ranks, st.range(0));
  const std::string dir = std::filesystem::temp_directory_path().string() + "/flatline-bench-jsonl";
  std::filesystem::remove_all(dir);
  int64_t bytes = 0;
  {
    JsonlDirSink files(dir);
    for (const Record& r : recs) files.write(r);
    bytes = files.bytes();
  }
  for (auto _ : st) {
    size_t n = 0;
    for (int r = 0; r < ranks; ++r) n += read_jsonl(dir + "/rank-" + std::to_string(r) + ".jsonl", nullptr).size();
    benchmark::DoNotOptimize(n);
  }
  st.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) * st.iterations() / 1e6, benchmark::Counter::kIsRate);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_ReadJsonl)->Arg(50)->Arg(2000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
