// Harness step time of the GPT configurations, bare (forward, backward, clip, AdamW: measure_step_ms)
// and as the harness runs it (train_rank on one rank: plus the telemetry signals — local and global
// grad norms, zero fraction, update and parameter norms, batch hash — the JSONL write, the heartbeat
// thread, the fault hooks) followed by live detection (the records through a Triage). The ratio is
// the overhead of telemetry + detection. Manual time: each iteration reports the median step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "detectors/triage.h"
#include "faults/scenario.h"
#include "sim/trainer.h"
#include "telemetry/jsonl.h"

namespace {
using namespace flatline;

Scenario gpt(int n_layer, int n_embd, int block, int batch, int steps) {
  return load_scenario_text("name: bench\nseed: 1\nmodel: {kind: gpt, n_layer: " + std::to_string(n_layer) +
                                ", n_head: 4, n_embd: " + std::to_string(n_embd) + ", block_size: " +
                                std::to_string(block) + "}\nsteps: " + std::to_string(steps) +
                                "\nbatch_size: " + std::to_string(batch) +
                                "\noptimizer: {kind: adamw, lr: 3.0e-4, grad_clip: 1.0}\nexpect: {cause: healthy}\n",
                            "<bench>");
}

Scenario config(const benchmark::State& st, int steps) {
  return st.range(0) == 0 ? gpt(4, 128, 128, 16, steps) : gpt(2, 64, 64, 8, steps);
}

void BM_StepBare(benchmark::State& st) {
  const int steps = static_cast<int>(st.range(1));
  for (auto _ : st) st.SetIterationTime(measure_step_ms(config(st, steps), steps, 1) / 1000.0);
  st.SetLabel(st.range(0) == 0 ? "gpt 4x128 block 128 batch 16" : "gpt 2x64 block 64 batch 8");
}

void BM_StepWithTelemetryAndDetection(benchmark::State& st) {
  const int steps = static_cast<int>(st.range(1));
  const std::string dir = (std::filesystem::temp_directory_path() / "flatline-bench-step").string();
  double detect_ms_per_step = 0;
  for (auto _ : st) {
    RankOptions o;
    o.scenario = config(st, steps + 1);
    o.run_dir = dir;
    o.threads = 1;
    o.run_t0 = 1;
    train_rank(o);
    std::vector<double> ms;
    auto recs = read_jsonl(dir + "/telemetry/rank-0.jsonl", nullptr);
    for (const auto& r : recs)
      if (r.kind == RecordKind::step && r.step > 1 && r.step_ms) ms.push_back(*r.step_ms);
    std::sort(ms.begin(), ms.end());
    const auto t0 = std::chrono::steady_clock::now();
    Triage tri(DetectorConfig{1});
    for (const auto& r : recs) tri.observe(r);
    tri.finish(recs.back().t);
    detect_ms_per_step =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
    st.SetIterationTime((ms[ms.size() / 2] + detect_ms_per_step) / 1000.0);
  }
  st.counters["detect_ms_per_step"] = detect_ms_per_step;
  std::filesystem::remove_all(dir);
}

// Args: {0 = large, 1 = small; steps timed}
BENCHMARK(BM_StepBare)->Args({0, 5})->Args({1, 20})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_StepWithTelemetryAndDetection)
    ->Args({0, 5})
    ->Args({1, 20})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
