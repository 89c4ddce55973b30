// Fleet simulator benchmarks (docs/DESIGN.md §11): simulation alone and simulation streamed into the Triage
// (records/s), and the end-to-end run `bench_fleet --full [--ranks N] [--steps S] [SCENARIO]`
// (default 1024 x 100,000 on scenarios/fleet/healthy.yaml) that prints wall time, peak RSS and the
// diagnosis. The ctest smoke run uses tiny sizes. Numbers: bench/README.md.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/peak_rss.h"
#include "detectors/triage.h"
#include "faults/scenario_file.h"
#include "sim/simulate/sinks.h"
#include "sim/simulate/simulator.h"

namespace {
using namespace flatline;

struct Count : RecordSink {
  int64_t n = 0;
  void write(const Record&) override { ++n; }
};

Scenario fleet(const std::string& name) {
  return load_scenario_file(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/fleet/" + name);
}

void BM_Simulate(benchmark::State& st) {
  SimOptions o;
  o.ranks = static_cast<int>(st.range(0));
  o.steps = st.range(1);
  const Scenario s = resolve_for_simulation(fleet("healthy.yaml"), o);
  int64_t records = 0;
  for (auto _ : st) {
    Count c;
    records += simulate(s, o, c).records;
  }
  st.counters["records/s"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulate)->Args({64, 200})->Args({1024, 50})->Unit(benchmark::kMillisecond);

// The detector suite's throughput: simulated records streamed into a Triage (the simulation's own
// cost is in BM_Simulate; subtract it for the detectors alone).
void BM_SimulateAndTriage(benchmark::State& st) {
  SimOptions o;
  o.ranks = static_cast<int>(st.range(0));
  o.steps = st.range(1);
  const Scenario s = resolve_for_simulation(fleet("healthy.yaml"), o);
  int64_t records = 0;
  for (auto _ : st) {
    DetectorConfig cfg;
    cfg.world_size = s.world_size;
    Triage t(cfg);
    TriageSink sink(t);
    records += simulate(s, o, sink).records;
    benchmark::DoNotOptimize(t.diagnosis());
  }
  st.counters["records/s"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimulateAndTriage)->Args({64, 200})->Args({1024, 50})->Unit(benchmark::kMillisecond);

using flatline::bench::peak_rss_mib;

int full(int argc, char** argv) {
  SimOptions o;
  o.ranks = 1024;
  o.steps = 100000;
  std::string path = std::string(FLATLINE_SOURCE_DIR) + "/scenarios/fleet/healthy.yaml";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) o.ranks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) o.steps = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--full")) path = argv[i];
  }
  const Scenario s = resolve_for_simulation(load_scenario_file(path), o);
  const auto t0 = std::chrono::steady_clock::now();
  DetectorConfig cfg;
  cfg.world_size = s.world_size;
  Triage t(cfg);
  TriageSink sink(t);
  const SimResult r = simulate(s, o, sink);
  const Diagnosis d = t.diagnosis();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %d ranks x %lld steps simulated and diagnosed\n", s.name.c_str(), s.world_size,
              static_cast<long long>(s.steps));
  std::printf("records %lld (%lld step, %lld heartbeats), wall %.2f s, %.2f M records/s, peak RSS %.0f MiB\n",
              static_cast<long long>(r.records), static_cast<long long>(r.step_records),
              static_cast<long long>(r.heartbeats), wall, r.records / wall / 1e6, peak_rss_mib());
  std::printf("%s", to_text(d).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--full")) return full(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
