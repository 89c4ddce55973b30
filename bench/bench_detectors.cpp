// Detector suite and reader throughput on simulated telemetry (issue 5): records/s of a whole Triage
// (the five checklist detectors, straggler, plateau) on a pre-generated trace, so the simulator's own
// cost is excluded; and MB/s of the JSONL reader on the same trace written as rank files.
// Numbers: bench/README.md.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <fstream>

#include "readers/reader.h"
#include "readers/tensorboard.pb.h"
#include "readers/tfrecord.h"

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

// Readers of other formats: a Lightning metrics.csv and a TensorBoard event file of `steps` steps
// (loss, lr, grad norm per step), parsed from memory-mapped-size strings read from disk.
std::string write_temp(const std::string& name, const std::string& data) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/" + name;
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

void report_mb(benchmark::State& st, size_t bytes) {
  st.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) * st.iterations() / 1e6, benchmark::Counter::kIsRate);
}

void BM_ReadLightningCsv(benchmark::State& st) {
  std::string csv = "epoch,grad_2.0_norm_total,lr-AdamW,step,train_loss\n";
  for (int64_t i = 1; i <= st.range(0); ++i)
    csv += fmt::format("{},{},{},{},{}\n", i / 1000, 0.5 + 1.0 / i, 3e-4, i, 2.0 + 3.0 / i);
  const std::string path = write_temp("flatline-bench-metrics.csv", csv);
  for (auto _ : st) benchmark::DoNotOptimize(read_log(path, "lightning").records.size());
  report_mb(st, csv.size());
  std::filesystem::remove(path);
}
BENCHMARK(BM_ReadLightningCsv)->Arg(20000)->Unit(benchmark::kMillisecond);

void BM_ReadTensorBoard(benchmark::State& st) {
  std::string file;
  for (int64_t i = 1; i <= st.range(0); ++i) {
    tb::Event e;
    e.set_wall_time(1.7e9 + 0.3 * static_cast<double>(i));
    e.set_step(i);
    for (auto [tag, v] : {std::pair<const char*, double>{"train/loss", 2.0 + 3.0 / i}, {"train/learning_rate", 3e-4},
                          {"train/grad_norm", 0.5 + 1.0 / i}}) {
      auto* val = e.mutable_summary()->add_value();
      val->set_tag(tag);
      val->set_simple_value(static_cast<float>(v));
    }
    file += readers::frame_tfrecord(e.SerializeAsString());
  }
  const std::string path = write_temp("flatline-bench.tfevents", file);
  for (auto _ : st) benchmark::DoNotOptimize(read_log(path, "tensorboard").records.size());
  report_mb(st, file.size());
  std::filesystem::remove(path);
}
BENCHMARK(BM_ReadTensorBoard)->Arg(20000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
