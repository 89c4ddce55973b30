// Drill benchmarks (docs/DESIGN.md §12): the time of each drill answer (a signal view rendered from the
// RunSummary) and of the --explain walk on a simulated 1024-rank x 50,000-step run, the summary's cost
// while the run streams (simulation alone vs simulation into a RunSummary, side by side) and its size.
// `bench_drill --full [--ranks N] [--steps S] [SCENARIO]` builds one drill run as `flatline drill` does
// (summary, then the detectors over a second simulation) and prints the wall time and peak RSS of each
// part. The ctest smoke run skips the 1024 x 50,000 cases. Numbers: bench/README.md.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "bench/peak_rss.h"
#include "faults/scenario_file.h"
#include "report/checklist_walk.h"
#include "report/drill_run.h"
#include "report/drill_views.h"
#include "sim/simulate/sinks.h"
#include "sim/simulate/simulator.h"

namespace {
using namespace flatline;

// The drill scenario with the richest views: a restart, repeats after it, re-run steps.
const char* kScenario = "data-replay-resume-drops-sampler.yaml";

Scenario drill_scenario(int ranks, int64_t steps, const std::string& file = kScenario) {
  const Scenario s = load_scenario_file(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/drill/" + file);
  DrillShape shape{ranks, steps};
  return drill_variant(s, shape, steps * 7 / 10, ranks / 3);
}

// One summary per shape, built on first use and kept for every view benchmark.
const RunSummary& summary(int ranks, int64_t steps) {
  static std::map<std::pair<int, int64_t>, std::unique_ptr<RunSummary>> cache;
  auto& p = cache[{ranks, steps}];
  if (!p) {
    const Scenario s = drill_scenario(ranks, steps);
    p = std::make_unique<RunSummary>(s.world_size);
    simulate(s, SimOptions{}, *p);
  }
  return *p;
}

using flatline::bench::peak_rss_mib;

struct Count : RecordSink {
  int64_t n = 0;
  void write(const Record&) override { ++n; }
};

// Side by side: the simulation into a counter, and into a RunSummary (the drill's only cost while the
// trainee waits).
void BM_SimulateOnly(benchmark::State& st) {
  const Scenario s = drill_scenario(static_cast<int>(st.range(0)), st.range(1));
  int64_t records = 0;
  for (auto _ : st) {
    Count c;
    simulate(s, SimOptions{}, c);
    records += c.n;
  }
  st.counters["records/s"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
void BM_SimulateIntoSummary(benchmark::State& st) {
  const Scenario s = drill_scenario(static_cast<int>(st.range(0)), st.range(1));
  int64_t records = 0;
  size_t bytes = 0;
  for (auto _ : st) {
    RunSummary sum(s.world_size);
    simulate(s, SimOptions{}, sum);
    records += sum.records();
    bytes = sum.bytes();
  }
  st.counters["records/s"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
  st.counters["summary_MiB"] = static_cast<double>(bytes) / (1 << 20);
  st.counters["peak_RSS_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_SimulateOnly)->Args({64, 2000})->Args({1024, 50000})->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_SimulateIntoSummary)->Args({64, 2000})->Args({1024, 50000})->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_DrillView(benchmark::State& st, const char* signal) {
  const RunSummary& s = summary(static_cast<int>(st.range(0)), st.range(1));
  size_t chars = 0;
  for (auto _ : st) {
    const std::string v = std::strcmp(signal, "loss") ? signal_view(s, signal) : loss_view(s);
    chars = v.size();
    benchmark::DoNotOptimize(v.data());
  }
  st.counters["chars"] = static_cast<double>(chars);
}
#define FLATLINE_DRILL_VIEW(sig) \
  BENCHMARK_CAPTURE(BM_DrillView, sig, #sig)->Args({64, 2000})->Args({1024, 50000})->Unit(benchmark::kMillisecond)
FLATLINE_DRILL_VIEW(loss);
FLATLINE_DRILL_VIEW(alive);
FLATLINE_DRILL_VIEW(lr);
FLATLINE_DRILL_VIEW(grad);
FLATLINE_DRILL_VIEW(ranks);
FLATLINE_DRILL_VIEW(data);
FLATLINE_DRILL_VIEW(scale);
FLATLINE_DRILL_VIEW(eval);

void BM_DrillExplainWalk(benchmark::State& st) {
  const RunSummary& s = summary(static_cast<int>(st.range(0)), st.range(1));
  for (auto _ : st) benchmark::DoNotOptimize(walk_checklist(s));
}
BENCHMARK(BM_DrillExplainWalk)->Args({64, 2000})->Args({1024, 50000})->Unit(benchmark::kMillisecond);

// What `flatline drill` does for one run, part by part, with the process's peak RSS after each.
int full(int argc, char** argv) {
  int ranks = 1024;
  int64_t steps = 50000;
  std::string file = kScenario;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--full")) file = argv[i];
  }
  const Scenario s = drill_scenario(ranks, steps, file);
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto t0 = now();
  RunSummary sum(s.world_size);
  const SimResult r = simulate(s, SimOptions{}, sum);
  const double t_sum = std::chrono::duration<double>(now() - t0).count();
  std::printf("%s: %d ranks x %lld steps, %lld records (%lld heartbeats)\n", s.name.c_str(), ranks,
              static_cast<long long>(steps), static_cast<long long>(r.records), static_cast<long long>(r.heartbeats));
  std::printf("summary: %.2f s (simulated and summarised), %.1f MiB held, peak RSS %.0f MiB\n", t_sum,
              static_cast<double>(sum.bytes()) / (1 << 20), peak_rss_mib());
  t0 = now();
  DetectorConfig cfg;
  cfg.world_size = s.world_size;
  Triage tri(cfg);
  TriageSink sink(tri);
  simulate(s, SimOptions{}, sink);
  const Diagnosis d = tri.diagnosis();
  std::printf("detectors: %.2f s (simulated again into the Triage), peak RSS %.0f MiB, diagnosis %s\n",
              std::chrono::duration<double>(now() - t0).count(), peak_rss_mib(), d.cause.c_str());
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
