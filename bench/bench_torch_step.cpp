// Harness step time of the GPT configurations, bare (train_rank with RankOptions::telemetry off: data,
// forward, backward, clip, AdamW) and as the harness runs it (plus the telemetry signals — local and global
// grad norms, zero fraction, update and parameter norms, batch hash — the JSONL write, the heartbeat
// thread, the fault hooks) followed by live detection (the records through a Triage). The ratio is
// the overhead of telemetry + detection. Manual time: each iteration reports the median step.
// Whole steps differ by less than their run-to-run noise (~2%), so BM_Telemetry* also time each part the
// telemetry adds to a step, on the small GPT's real gradients and parameters: the zero count and
// overflow check folded into the gradient-norm pass, the update and parameter norms folded into the
// optimizer's pass, the batch hash, and one flushed JSONL step record.
// FLATLINE_BENCH_DEVICE=cuda runs the whole-step benchmarks on the GPU (the aten step, fp16 autocast +
// GradScaler kernels) and adds a GPT-2-small-sized model (12 layers, 768, block 1024, batch 8):
// scripts/device-check.sh does.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "detectors/triage.h"
#include "faults/scenario_file.h"
#include "sim/models.h"
#include "sim/optimizer.h"
#include "run/sampler.h"
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

// The device of the whole-step benchmarks (FLATLINE_BENCH_DEVICE, default cpu).
std::string bench_device() {
  const char* d = std::getenv("FLATLINE_BENCH_DEVICE");
  return d && *d ? d : "cpu";
}

// range(0): 0 = large (4x128, block 128, batch 16), 1 = small (2x64, block 64, batch 8), 2 = GPT-2 small
// (12x768, 12 heads, block 1024, batch 8). On cuda every size trains in fp16 (autocast + GradScaler).
Scenario config(const benchmark::State& st, int steps) {
  Scenario s = st.range(0) == 0 ? gpt(4, 128, 128, 16, steps) : st.range(0) == 1 ? gpt(2, 64, 64, 8, steps)
                                                                                 : gpt(12, 768, 1024, 8, steps);
  if (st.range(0) == 2) s.model.n_head = 12;
  if (bench_device() == "cuda") {
    set_placement(s, "cuda", "", "FLATLINE_BENCH_DEVICE");
    s.precision = "fp16";
  }
  return s;
}

const char* label(const benchmark::State& st) {
  return st.range(0) == 0 ? "gpt 4x128 block 128 batch 16" : st.range(0) == 1 ? "gpt 2x64 block 64 batch 8"
                                                                               : "gpt 12x768 block 1024 batch 8";
}

// One run of train_rank on one rank with telemetry, then its records through a Triage. step_ms: the
// median of the steps after the first (each from data to its record queued); detect_ms: triage time per
// step. The bare counterpart is measure_step_ms: the same train_rank with telemetry off.
struct TimedRun {
  double step_ms = 0, detect_ms = 0;
};
TimedRun run_with_telemetry(const Scenario& s, int steps) {
  // per process: two benchmark runs on one machine (other worktrees) must not share it
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("flatline-bench-step-" + std::to_string(::getpid()))).string();
  RankOptions o;
  o.scenario = s;
  o.scenario.steps = steps + 1;
  o.run_dir = dir;
  o.threads = 1;
  o.run_t0 = 1;
  RankResult res = train_rank(o);
  std::vector<double> ms(res.step_ms.begin() + 1, res.step_ms.end());
  std::sort(ms.begin(), ms.end());
  TimedRun run;
  run.step_ms = ms[ms.size() / 2];
  auto recs = read_jsonl(dir + "/telemetry/rank-0.jsonl", nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  Triage tri(DetectorConfig{1});
  for (const auto& r : recs) tri.observe(r);
  tri.finish(recs.back().t);
  run.detect_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::filesystem::remove_all(dir);
  return run;
}

void BM_StepBare(benchmark::State& st) {
  const int steps = static_cast<int>(st.range(1));
  for (auto _ : st) st.SetIterationTime(measure_step_ms(config(st, steps), steps, 1) / 1000.0);
  st.SetLabel(label(st));
}

void BM_StepWithTelemetryAndDetection(benchmark::State& st) {
  const int steps = static_cast<int>(st.range(1));
  TimedRun run;
  for (auto _ : st) {
    run = run_with_telemetry(config(st, steps), steps);
    st.SetIterationTime((run.step_ms + run.detect_ms) / 1000.0);
  }
  st.counters["detect_ms_per_step"] = run.detect_ms;
  st.SetLabel(label(st));
}

// The small GPT after one forward + backward: parameters with real gradients.
struct SmallGpt {
  std::shared_ptr<TrainModel> model;
  std::vector<at::Tensor> params, grads;
  SmallGpt() {
    at::set_num_threads(1);
    at::manual_seed(1);
    ModelSpec spec;
    spec.kind = "gpt";
    spec.n_layer = 2;
    spec.n_head = 4;
    spec.n_embd = 64;
    spec.block_size = 64;
    model = make_model(spec);
    params = model->parameters();
    at::Tensor x = at::randint(0, 256, {8, 64}, at::kLong), y = at::randint(0, 256, {8, 64}, at::kLong);
    model->loss(x, y).backward();
    for (auto& p : params) grads.push_back(p.grad());
  }
};

// Arg: 1 = what the harness computes (sum of squares, zero count, overflow check), 0 = the norm alone
void BM_TelemetryGradStats(benchmark::State& st) {
  SmallGpt m;
  for (auto _ : st) benchmark::DoNotOptimize(tensor_stats(m.grads, st.range(0) == 1));
}

// Arg: 1 = with the update and parameter norms, 0 = the update alone
void BM_TelemetryOptimizerNorms(benchmark::State& st) {
  SmallGpt m;
  OptimizerSpec spec;
  Optimizer opt(spec, m.params);
  for (auto _ : st) benchmark::DoNotOptimize(opt.step(1e-9, 1.0, st.range(0) == 1));
}

void BM_TelemetryBatchHash(benchmark::State& st) {
  DistributedSampler sampler(100000, 1, 0, 8, 1, 1);
  const std::vector<int64_t> ids = sampler.next();
  for (auto _ : st) benchmark::DoNotOptimize(batch_hash(ids));
}

// One step record with every field, written and flushed (one line per step, as train_rank does)
void BM_TelemetryWriteStepRecord(benchmark::State& st) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("flatline-bench-record-" + std::to_string(::getpid()) + ".jsonl")).string();
  Record r;
  r.rank = 0;
  r.t = 12.345678;
  r.step = 1234;
  r.opt_step = 1234;
  r.loss = 2.3456789;
  r.loss_avg = 2.3456789;
  r.lr = 3e-4;
  r.grad_norm = 0.87654321;
  r.local_grad_norm = 0.87654321;
  r.grad_zero_frac = 0.0;
  r.param_norm = 45.678;
  r.update_norm = 0.0123;
  r.loss_scale = 65536;
  r.overflow = false;
  r.skipped = false;
  r.batch_hash = 0x0123456789abcdefULL;
  r.epoch = 0;
  r.samples_seen = 9872;
  r.step_ms = 6.54;
  r.comm_ms = 0.0;
  {
    JsonlWriter w(path);
    for (auto _ : st) w.write(r);
  }
  std::filesystem::remove(path);
}

BENCHMARK(BM_TelemetryGradStats)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TelemetryOptimizerNorms)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TelemetryBatchHash)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TelemetryWriteStepRecord)->Unit(benchmark::kMicrosecond);

// Whole steps, bare and with telemetry + detection, alternating in one process (and alternating which
// goes first) so that a noisy moment hits both: `rounds` rounds of `steps` steps each, the same
// train_rank with RankOptions::telemetry off and on; reports the median of the per-round overheads.
void BM_StepOverheadAlternating(benchmark::State& st) {
  const int steps = static_cast<int>(st.range(1)), rounds = static_cast<int>(st.range(2));
  std::vector<double> pct, bare_ms, tel_ms;
  for (auto _ : st) {
    for (int r = 0; r < rounds; ++r) {
      if (r % 2 == 0) bare_ms.push_back(measure_step_ms(config(st, steps), steps, 1));
      const TimedRun w = run_with_telemetry(config(st, steps), steps);
      tel_ms.push_back(w.step_ms + w.detect_ms);
      if (r % 2 == 1) bare_ms.push_back(measure_step_ms(config(st, steps), steps, 1));
      pct.push_back(100.0 * (tel_ms.back() / bare_ms.back() - 1.0));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  st.counters["bare_ms"] = median(bare_ms);
  st.counters["with_telemetry_ms"] = median(tel_ms);
  st.counters["overhead_pct_median"] = median(pct);
  st.counters["overhead_pct_min"] = *std::min_element(pct.begin(), pct.end());
  st.counters["overhead_pct_max"] = *std::max_element(pct.begin(), pct.end());
  st.SetLabel(label(st));
}
// {small, 20 steps, 3 rounds}: the ctest smoke run; {small, 100 steps, 25 rounds}: the number reported
BENCHMARK(BM_StepOverheadAlternating)->Args({1, 20, 3})->Args({1, 100, 25})->Unit(benchmark::kMillisecond)->Iterations(1);

// Args: {0 = large, 1 = small; steps timed}
BENCHMARK(BM_StepBare)->Args({0, 5})->Args({1, 20})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_StepWithTelemetryAndDetection)
    ->Args({0, 5})
    ->Args({1, 20})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  if (bench_device() == "cuda") {  // every size, 5 rounds of 20 steps alternating (device-check.sh's budget)
    for (int size : {0, 1, 2})
      benchmark::RegisterBenchmark("BM_StepOverheadAlternatingCuda", BM_StepOverheadAlternating)
          ->Args({size, 20, 5})
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
