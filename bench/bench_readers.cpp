// Reader throughput (docs/DESIGN.md §10): MB/s of every log reader on a synthetic log of its format, read the
// way `flatline diagnose` reads it (read_log: file read, format detection, parsing, records). The
// JSONL reader runs on a simulated 8-rank trace (the harness's telemetry layout), both file by file
// (read_jsonl) and as a run directory (read_log: + the merge of ranks by t). Inputs are generated
// in memory once, written to a temp dir, and read from the page cache. MB/s is the input's bytes over
// the benchmark thread's CPU time (Google Benchmark's rate counters: user + system, so the page-cache
// copy and page faults count; time waiting for a core does not). Numbers: bench/README.md.
// Only read_log(path) and read_jsonl are called, so the same file also builds against older trees
// (for the before/after rows of the README, measured side by side).
#include <benchmark/benchmark.h>
#include <unistd.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>
#include <chrono>
#include <thread>
#include <atomic>

#include "faults/scenario_file.h"
#include "readers/reader.h"
#if __has_include("readers/follow.h")
#include "readers/follow.h"
#endif
#include "telemetry/tensorboard.pb.h"
#include "telemetry/tfrecord.h"
#if __has_include("readers/wandb_run.pb.h")
#include <zlib.h>

#include "readers/wandb_run.pb.h"
#endif
#include "sim/simulate/simulator.h"
#include "sim/simulate/sinks.h"
#include "telemetry/jsonl.h"
#include "detectors/triage.h"

namespace {
using namespace flatline;
namespace fs = std::filesystem;

const std::string& tmp() {
  static const std::string d = [] {
    const std::string p = (fs::temp_directory_path() / fmt::format("flatline-bench-readers-{}", ::getpid())).string();
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::string write_temp(const std::string& name, const std::string& data) {
  const std::string path = tmp() + "/" + name;
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

void report_mb(benchmark::State& st, size_t bytes) {
  st.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(st.iterations()) / 1e6,
                                           benchmark::Counter::kIsRate);
}

// A smooth loss curve with a little noise (deterministic).
double loss_at(int64_t i) { return 2.0 + 3.0 / (1.0 + 0.01 * static_cast<double>(i)) + 0.01 * std::sin(0.7 * i); }
double lr_at(int64_t i) { return 3e-4 * std::min<double>(1.0, static_cast<double>(i) / 100.0); }

// --- flatline JSONL: a simulated healthy 8-rank run, written as the harness writes it ---------------
struct Jsonl {
  std::string dir;
  int64_t bytes = 0;
};
const Jsonl& jsonl_run(int64_t steps) {
  static std::map<int64_t, Jsonl> cache;
  Jsonl& j = cache[steps];
  if (j.dir.empty()) {
    j.dir = tmp() + fmt::format("/run-{}", steps);
    fs::remove_all(j.dir);
    SimOptions o;
    o.ranks = 8;
    o.steps = steps;
    const Scenario s = resolve_for_simulation(
        load_scenario_file(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/fleet/healthy.yaml"), o);
    JsonlDirSink files(j.dir + "/telemetry");
    simulate(s, o, files);
    j.bytes = files.bytes();
  }
  return j;
}

void BM_ReadJsonlFiles(benchmark::State& st) {
  const Jsonl& j = jsonl_run(st.range(0));
  for (auto _ : st) {
    size_t n = 0;
    for (int r = 0; r < 8; ++r) n += read_jsonl(j.dir + "/telemetry/rank-" + std::to_string(r) + ".jsonl", nullptr).size();
    benchmark::DoNotOptimize(n);
  }
  report_mb(st, static_cast<size_t>(j.bytes));
}
BENCHMARK(BM_ReadJsonlFiles)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond);

void BM_ReadLogRunDir(benchmark::State& st) {
  const Jsonl& j = jsonl_run(st.range(0));
  for (auto _ : st) benchmark::DoNotOptimize(read_log(j.dir).records.size());
  report_mb(st, static_cast<size_t>(j.bytes));
}
BENCHMARK(BM_ReadLogRunDir)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond);

#ifdef FLATLINE_READERS_LOGSTREAM
// What `flatline diagnose` and `replay` read a run directory with: rank files streamed a chunk at a
// time and merged by t as consumed (nothing held), the records only counted here.
void BM_StreamRunDir(benchmark::State& st) {
  const Jsonl& j = jsonl_run(st.range(0));
  for (auto _ : st) {
    LogStream s(j.dir);
    std::vector<Record> batch;
    size_t n = 0;
    while (s.next(batch)) n += batch.size();
    benchmark::DoNotOptimize(n);
  }
  report_mb(st, static_cast<size_t>(j.bytes));
}
BENCHMARK(BM_StreamRunDir)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond);
#endif

// --- the other formats: `n` steps each --------------------------------------------------------------
template <class Make>
void bench_file(benchmark::State& st, const std::string& name, Make make) {
  static std::map<std::string, std::pair<std::string, size_t>> cache;
  auto& c = cache[name];
  if (c.first.empty()) {
    const std::string data = make(st.range(0));
    c = {write_temp(name, data), data.size()};
  }
  for (auto _ : st) benchmark::DoNotOptimize(read_log(c.first).records.size());
  report_mb(st, c.second);
}

std::string hf_state(int64_t n) {
  std::string s = "{\n  \"best_metric\": null,\n  \"epoch\": 3.0,\n  \"global_step\": " + std::to_string(n) +
                  ",\n  \"log_history\": [\n";
  for (int64_t i = 1; i <= n; ++i)
    s += fmt::format("    {{\n      \"epoch\": {},\n      \"grad_norm\": {},\n      \"learning_rate\": {},\n"
                     "      \"loss\": {:.4f},\n      \"step\": {}\n    }},\n",
                     static_cast<double>(i) / 1000.0, 0.5 + 1.0 / static_cast<double>(i), lr_at(i), loss_at(i), i);
  s += "    {\n      \"epoch\": 3.0,\n      \"step\": " + std::to_string(n) +
       ",\n      \"train_loss\": 2.5,\n      \"train_runtime\": 100.0\n    }\n  ],\n  \"max_steps\": " +
       std::to_string(n) + "\n}\n";
  return s;
}
void BM_ReadHfTrainerState(benchmark::State& st) { bench_file(st, "hf/trainer_state.json", hf_state); }
BENCHMARK(BM_ReadHfTrainerState)->Arg(20000)->Unit(benchmark::kMillisecond);

std::string megatron_log(int64_t n) {
  std::string s = "training ...\n";
  for (int64_t i = 1; i <= n; ++i)
    s += fmt::format(
        " [2024-01-01 {:02d}:{:02d}:{:02d}] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per "
        "iteration (ms): 812.3 | learning rate: {:.6E} | global batch size:   256 | lm loss: {:.6E} | loss scale: "
        "65536.0 | grad norm: {:.3f} | num zeros: 0.0 | params norm: 210.345 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |\n",
        (i / 3600) % 24, (i / 60) % 60, i % 60, i * 10, n * 10, i * 2560, lr_at(i), loss_at(i), 0.5 + 1.0 / i);
  return s;
}
void BM_ReadMegatronLog(benchmark::State& st) { bench_file(st, "megatron.log", megatron_log); }
BENCHMARK(BM_ReadMegatronLog)->Arg(20000)->Unit(benchmark::kMillisecond);

std::string deepspeed_log(int64_t n) {
  std::string s = "[2024-01-01 12:00:00,000] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:\n";
  for (int64_t i = 1; i <= n; ++i)
    s += fmt::format(
        "[2024-01-01 {:02d}:{:02d}:{:02d},000] [INFO] [logging.py:96:log_dist] [Rank 0] step={}, skipped=0, "
        "lr=[{}], mom=[(0.9, 0.999)]\n",
        (i / 3600) % 24, (i / 60) % 60, i % 60, i, lr_at(i));
  return s;
}
void BM_ReadDeepSpeedLog(benchmark::State& st) { bench_file(st, "deepspeed.log", deepspeed_log); }
BENCHMARK(BM_ReadDeepSpeedLog)->Arg(20000)->Unit(benchmark::kMillisecond);

std::string lightning_csv(int64_t n) {
  std::string csv = "epoch,grad_2.0_norm_total,lr-AdamW,step,train_loss\n";
  for (int64_t i = 1; i <= n; ++i) csv += fmt::format("{},{},{},{},{}\n", i / 1000, 0.5 + 1.0 / i, 3e-4, i, 2.0 + 3.0 / i);
  return csv;
}
void BM_ReadLightningCsv(benchmark::State& st) { bench_file(st, "lightning/metrics.csv", lightning_csv); }
BENCHMARK(BM_ReadLightningCsv)->Arg(20000)->Unit(benchmark::kMillisecond);

std::string wandb_csv(int64_t n) {
  std::string csv = "_step,_runtime,_timestamp,train/loss,train/learning_rate,train/grad_norm,train/epoch,train/global_step\n";
  for (int64_t i = 1; i <= n; ++i)
    csv += fmt::format("{},{:.1f},{:.1f},{:.6f},{},{:.6f},{:.4f},{}\n", i - 1, 0.5 * i, 1704110400 + 0.5 * i,
                       loss_at(i), lr_at(i), 0.5 + 1.0 / i, i / 1000.0, i);
  return csv;
}
void BM_ReadWandbCsv(benchmark::State& st) { bench_file(st, "wandb/history.csv", wandb_csv); }
BENCHMARK(BM_ReadWandbCsv)->Arg(20000)->Unit(benchmark::kMillisecond);

std::string tensorboard_events(int64_t n) {
  std::string file;
  for (int64_t i = 1; i <= n; ++i) {
    tb::Event e;
    e.set_wall_time(1.7e9 + 0.3 * static_cast<double>(i));
    e.set_step(i);
    for (auto [tag, v] : {std::pair<const char*, double>{"train/loss", 2.0 + 3.0 / i}, {"train/learning_rate", 3e-4},
                          {"train/grad_norm", 0.5 + 1.0 / i}}) {
      auto* val = e.mutable_summary()->add_value();
      val->set_tag(tag);
      val->set_simple_value(static_cast<float>(v));
    }
    file += frame_tfrecord(e.SerializeAsString());
  }
  return file;
}
void BM_ReadTensorBoard(benchmark::State& st) { bench_file(st, "tb/events.out.tfevents.1.bench", tensorboard_events); }
BENCHMARK(BM_ReadTensorBoard)->Arg(20000)->Unit(benchmark::kMillisecond);

#if __has_include("readers/wandb_run.pb.h")
// A W&B run's transaction log (readers/wandb_run.cpp): one HistoryRecord per step with the HF
// integration's keys, framed in 32 KiB LevelDB blocks with W&B's header and CRC-32.
std::string wandb_run(int64_t n) {
  std::string out(":W&B\xe1\xbe\x00", 7), chunk;
  auto put = [&](const std::string& rec) {
    size_t at = 0;
    bool first = true;
    while (true) {
      size_t left = 32768 - out.size() % 32768;
      if (left < 7) {
        out.append(left, '\0');
        left = 32768;
      }
      const size_t len = std::min(rec.size() - at, left - 7);
      const bool last = at + len == rec.size();
      const unsigned char type = first && last ? 1 : first ? 2 : last ? 4 : 3;
      uLong c = ::crc32(0L, &type, 1);
      c = ::crc32(c, reinterpret_cast<const Bytef*>(rec.data() + at), static_cast<uInt>(len));
      for (int i = 0; i < 4; ++i) out += static_cast<char>((c >> (8 * i)) & 0xff);
      out += static_cast<char>(len & 0xff);
      out += static_cast<char>(len >> 8);
      out += static_cast<char>(type);
      out.append(rec, at, len);
      at += len;
      first = false;
      if (last) break;
    }
  };
  for (int64_t i = 1; i <= n; ++i) {
    wb::Record r;
    r.set_num(i);
    auto* h = r.mutable_history();
    h->mutable_step()->set_num(i - 1);
    for (auto [k, v] : {std::pair<const char*, double>{"train/loss", loss_at(i)}, {"train/learning_rate", lr_at(i)},
                        {"train/grad_norm", 0.5 + 1.0 / static_cast<double>(i)}, {"train/epoch", i / 1000.0},
                        {"train/global_step", static_cast<double>(i)}, {"_step", static_cast<double>(i - 1)},
                        {"_runtime", 0.5 * static_cast<double>(i)}, {"_timestamp", 1.7e9 + 0.5 * static_cast<double>(i)}}) {
      auto* it = h->add_item();
      it->add_nested_key(k);
      it->set_value_json(fmt::format("{}", v));
    }
    put(r.SerializeAsString());
  }
  return out;
}
void BM_ReadWandbRun(benchmark::State& st) { bench_file(st, "wandb/run-bench.wandb", wandb_run); }
BENCHMARK(BM_ReadWandbRun)->Arg(20000)->Unit(benchmark::kMillisecond);
#endif

#ifdef FLATLINE_READERS_FOLLOW
// A job's console (readers/console.cpp): HF Trainer's printed dicts (transformers 5's quoted values)
// between tqdm bar redraws, as a captured stdout has them.
std::string console_log(int64_t n) {
  std::string s;
  for (int64_t i = 1; i <= n; ++i)
    s += fmt::format(" {:3d}%|#         | {}/{} [00:{:02d}<00:10, 12.00it/s]\r{{'loss': '{:.4g}', 'grad_norm': '{:.4g}', "
                     "'learning_rate': '{:.4g}', 'epoch': '{:.3g}'}}\n",
                     i * 100 / n, i, n, i % 60, loss_at(i), 0.5 + 1.0 / static_cast<double>(i), lr_at(i), i / 1000.0);
  return s;
}
void BM_ReadConsoleLog(benchmark::State& st) { bench_file(st, "console.log", console_log); }
BENCHMARK(BM_ReadConsoleLog)->Arg(20000)->Unit(benchmark::kMillisecond);
#endif

#ifdef FLATLINE_READERS_FOLLOW
// --follow's latency, from a line written to its finding: a Megatron log (tests/data/logs/megatron
// lr_zero.log) written up to the line before the one that completes lr_zero (iteration 410); a
// writer thread appends and flushes that line at a random moment of the polling cycle, while the
// follower polls every `poll` ms (0: back to back) and feeds the Triage; the time reported is from
// the write to the finding (manual time). The default `diagnose --follow` polls every 200 ms.
void BM_FollowLatency(benchmark::State& st) {
  const std::string src = std::string(FLATLINE_SOURCE_DIR) + "/tests/data/logs/megatron/lr_zero.log";
  std::ifstream in(src);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l + "\n");
  size_t trigger = 0;
  while (trigger < lines.size() && lines[trigger].find("iteration      410/") == std::string::npos) ++trigger;
  const auto poll = std::chrono::microseconds(st.range(0) * 1000);
  const std::string path = tmp() + "/follow.log";
  uint64_t seed = 12345;
  for (auto _ : st) {
    std::filesystem::remove(path);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    for (size_t i = 0; i < trigger; ++i) std::fputs(lines[i].c_str(), f);
    std::fflush(f);
    Follower follower(path);
    Triage tri;
    std::atomic<bool> fired{false};
    tri.on_finding([&](const Finding&) { fired = true; });
    std::vector<Record> recs;
    follower.poll(recs);
    for (const auto& r : recs) tri.observe(r);
    recs.clear();
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto delay = std::chrono::microseconds(poll.count() ? (seed >> 33) % static_cast<uint64_t>(poll.count()) : 0);
    std::chrono::steady_clock::time_point written;
    std::thread w([&] {
      std::this_thread::sleep_for(delay);
      std::fputs(lines[trigger].c_str(), f);
      std::fflush(f);
      written = std::chrono::steady_clock::now();
    });
    bool joined = false;
    while (!fired) {
      if (poll.count()) std::this_thread::sleep_for(poll);
      if (!joined && poll.count() == 0) {  // back to back: poll once the line is there
        w.join();
        joined = true;
      }
      follower.poll(recs);
      for (const auto& r : recs) tri.observe(r);
      recs.clear();
    }
    const auto done = std::chrono::steady_clock::now();
    if (!joined) w.join();
    st.SetIterationTime(std::chrono::duration<double>(done - written).count());
    std::fclose(f);
  }
}
BENCHMARK(BM_FollowLatency)->Arg(0)->Arg(200)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(40);
#endif

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  fs::remove_all(tmp());
  return 0;
}
