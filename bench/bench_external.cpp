// The external-detector feed (external/feed.h, docs/DESIGN.md §13): records/s from a recorded stream into
// a detector process, in the lock-step replay (one record in the pipe at a time, the next once the
// detector waits again: what `flatline score CORPUS --detector ...` does) and written as fast as the
// pipe takes them (what a live run's feed does when it is behind), for a null detector (cat) and a
// Python one that parses every line. The stream: 2 ranks x 240 steps (a main-suite run; the process's
// start-up included) and x 2400 steps (the feed's steady rate).
// Numbers: bench/README.md.
#include <benchmark/benchmark.h>

#include <map>
#include <vector>

#include "external/feed.h"

namespace {
using namespace flatline;

const std::vector<Record>& stream(int steps) {
  static std::map<int, std::vector<Record>> cache;
  auto& v = cache[steps];
  if (v.empty()) v = [steps] {
    std::vector<Record> out;
    for (int s = 1; s <= steps; ++s)
      for (int rank = 0; rank < 2; ++rank) {
        Record r;
        r.rank = rank;
        r.step = s;
        r.t = 0.006 * s + 0.0001 * rank;
        r.opt_step = s;
        r.loss = r.loss_avg = 3.0 - 0.002 * s;
        r.lr = 3e-3;
        r.grad_norm = r.local_grad_norm = 0.8;
        r.grad_zero_frac = 0;
        r.param_norm = 40;
        r.update_norm = 0.1;
        r.loss_scale = 1;
        r.overflow = r.skipped = false;
        r.batch_hash = 0x1234567890abcdefull + s;
        r.epoch = 0;
        r.samples_seen = 16 * s;
        r.step_ms = 6.5;
        r.comm_ms = 0.4;
        out.push_back(r);
      }
    return out;
  }();
  return v;
}

void feed(benchmark::State& st, FeedMode mode, const char* command) {
  const auto& recs = stream(static_cast<int>(st.range(0)));
  for (auto _ : st) {
    FeedOptions o;
    o.mode = mode;
    o.world_size = 2;
    auto out = feed_recorded(recs, {{"d", command}}, o, /*speed=*/1e9);
    if (!out[0].error.empty() || out[0].records_read != static_cast<int64_t>(recs.size()))
      st.SkipWithError(out[0].error.c_str());
  }
  st.counters["records/s"] =
      benchmark::Counter(static_cast<double>(recs.size()) * st.iterations(), benchmark::Counter::kIsRate);
}

constexpr const char* kCat = "cat > /dev/null";
constexpr const char* kPython = "python3 -c 'import json, sys\nfor l in sys.stdin: json.loads(l)'";

void BM_FeedLockStepCat(benchmark::State& st) { feed(st, FeedMode::unpaced, kCat); }
void BM_FeedLockStepPython(benchmark::State& st) { feed(st, FeedMode::unpaced, kPython); }
// paced at 1e9 x recorded time: every record released at once, written as fast as the pipe takes them
void BM_FeedStreamCat(benchmark::State& st) { feed(st, FeedMode::paced, kCat); }
void BM_FeedStreamPython(benchmark::State& st) { feed(st, FeedMode::paced, kPython); }

BENCHMARK(BM_FeedLockStepCat)->Arg(240)->Arg(2400)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FeedLockStepPython)->Arg(240)->Arg(2400)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FeedStreamCat)->Arg(240)->Arg(2400)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FeedStreamPython)->Arg(240)->Arg(2400)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
