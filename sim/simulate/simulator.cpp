// The fleet simulator's step walk (simulator.h): the same order as sim/trainer.cpp's step (data,
// compute, all-reduce, optimizer, logging, eval, checkpoint, restart), with the faults' StepActions
// interpreted the way the trainer interprets them, for every rank at once.
#include "sim/simulate/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

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

namespace {

// The simulator on a thread of its own, the sink on the caller's (docs/DESIGN.md §11): what the walk
// writes is queued in order; a logged step's block changes hands without a copy (Handoff), the rest is
// copied (events, eval records, blocks of heartbeats alone: a few per step at most). At most kInFlight
// step blocks wait; the walk waits for a spent one beyond that. An exception on either side stops both
// and is rethrown by simulate().
class Pipeline : public RecordSink, public simdetail::Handoff {
 public:
  static constexpr size_t kInFlight = 3;
  explicit Pipeline(RecordSink& sink) : sink_(sink) {}

  // ---- the walk's side
  void write(const Record& r) override { push(Item{Item::kRecord, {}, r, 0}); }
  void write_block(const StepBlock& b) override {
    Item it{Item::kBlock, {}, {}, 0};
    it.block = b;  // heartbeats alone: small
    push(std::move(it));
  }
  void end(double t_end) override { push(Item{Item::kEnd, {}, {}, t_end}); }
  const std::vector<int>* batch_hash_ranks() const override { return sink_.batch_hash_ranks(); }
  void rows(StepBlock& b) override {
    Item it{Item::kRows, {}, {}, 0};
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [this] { return rows_in_flight_ < kInFlight || failed_; });
      if (failed_) throw Stopped{};
      ++rows_in_flight_;
      if (!spent_.empty()) {
        it.block = std::move(spent_.back());
        spent_.pop_back();
      }
    }
    std::swap(it.block, b);  // b: a spent block's buffers (or none yet): the walk fills every column
    push(std::move(it));
  }
  void fail() {  // the walk failed: the consumer stops after what it has
    std::lock_guard<std::mutex> l(m_);
    walk_failed_ = true;
    cv_.notify_all();
  }

  // ---- the caller's side: everything to the sink, in order, until the end (or a failure)
  void drain() {
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [this] { return !items_.empty() || walk_failed_; });
        if (items_.empty()) return;  // the walk failed
        it = std::move(items_.front());
        items_.pop_front();
        cv_.notify_all();
      }
      try {
        switch (it.kind) {
          case Item::kRecord: sink_.write(it.record); break;
          case Item::kBlock: sink_.write_block(it.block); break;
          case Item::kRows: sink_.write_block(it.block); break;
          case Item::kEnd: sink_.end(it.t); return;
        }
      } catch (...) {
        std::lock_guard<std::mutex> l(m_);
        failed_ = true;
        cv_.notify_all();
        throw;
      }
      if (it.kind == Item::kRows) {
        std::lock_guard<std::mutex> l(m_);
        spent_.push_back(std::move(it.block));
        --rows_in_flight_;
        cv_.notify_all();
      }
    }
  }

  struct Stopped {};  // thrown on the walk's thread when the consumer failed

 private:
  struct Item {
    enum Kind { kRecord, kBlock, kRows, kEnd } kind = kRecord;
    StepBlock block;
    Record record;
    double t = 0;
  };
  void push(Item it) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [this] { return items_.size() < 4 * kInFlight + 64 || failed_; });  // events: a burst per rank
    if (failed_) throw Stopped{};
    items_.push_back(std::move(it));
    cv_.notify_all();
  }
  RecordSink& sink_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::vector<StepBlock> spent_;
  size_t rows_in_flight_ = 0;
  bool failed_ = false, walk_failed_ = false;
};

// Below this many ranks a step is too small to be worth a handover between threads.
constexpr int kPipelineRanks = 64;

}  // namespace

SimResult simulate(const Scenario& sc, const SimOptions& o, RecordSink& sink) {
  static const bool parallel = std::thread::hardware_concurrency() > 1;
  if (!parallel || sc.world_size < kPipelineRanks) {
    simdetail::Walk w(sc, o, sink);
    return w.run();
  }
  Pipeline pipe(sink);
  SimResult result;
  std::exception_ptr walk_error;
  std::thread walker([&] {
    try {
      simdetail::Walk w(sc, o, pipe, &pipe);
      result = w.run();
    } catch (const Pipeline::Stopped&) {
      // the consumer failed: its exception is the one to report
    } catch (...) {
      walk_error = std::current_exception();
      pipe.fail();
    }
  });
  try {
    pipe.drain();
  } catch (...) {
    walker.join();
    throw;
  }
  walker.join();
  if (walk_error) std::rethrow_exception(walk_error);
  return result;
}

}  // namespace flatline
