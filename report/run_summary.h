// RunSummary: what the drill's signals show, built while a run's records stream past (docs/DESIGN.md
// §12). A fleet run is too large to hold as Records (1024 ranks x 50k steps is ~52 M step records and
// ~19 M heartbeats, ~28 GB as 400-byte Records), so the drill keeps, in one pass:
//   - the series rank's step records as compact rows (the lowest rank that wrote any: every series a
//     person reads — loss, lr, grad norm, loss scale — is the same on every data-parallel rank but the
//     loss, which is logged as loss_avg, the mean over ranks): O(steps);
//   - per rank, a few counters: liveness (last step, when it was reached, gaps, the longest stretch of
//     one logged step repeated, the last heartbeat and its phase, error / run_end events), local grad
//     norm (last kWindow values, zero steps), compute and all-reduce time: O(ranks);
//   - per step (the n-th step record of every rank), the local grad norm across ranks: min, max, mean,
//     how many ranks were zero: O(steps);
//   - the batch fingerprints of up to kTrackedRanks ranks (all of them in a small world, else spread
//     evenly from 0 to the last): every hash with the step it was first trained at, so a replay of
//     batches from any time in the run shows, and the records right after each resume: O(steps x 16);
//   - a thinned sample of every rank's heartbeats (at most kHeartbeatSample, halved as it fills), and
//     the series rank's run events (start, restart, resume, end, error).
// Memory: ~110 bytes per step record of the series rank (its row and the across-ranks entry), ~50 bytes
// per distinct batch of each tracked rank, ~460 bytes per rank; 1024 ranks x 50k steps: 30 MiB
// (bench/README.md). Same records in any interleaving of ranks
// (each rank's own order kept) give the same summary, but for the heartbeat sample.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sim/simulate/simulator.h"
#include "telemetry/record.h"

namespace flatline {

class RunSummary : public RecordSink {
 public:
  static constexpr int kWindow = 20;            // last local grad norms kept per rank
  static constexpr int kTrackedRanks = 16;      // ranks whose batch fingerprints are kept
  static constexpr int kAfterResume = 6;        // hashed records listed after each resume, per tracked rank
  static constexpr size_t kHeartbeatSample = 4096;
  static constexpr double kZeroNorm = 1e-12;    // a local grad norm at or below this is "zero"

  // world_size: the ranks to expect (picks the tracked ranks); 0: unknown, ranks below kTrackedRanks
  // are tracked.
  explicit RunSummary(int world_size = 0);

  void write(const Record& r) override;
  void write_block(const StepBlock& b) override;
  void end(double t_end) override;
  // The ranks whose batch fingerprints it keeps (the simulator hashes only their batches for it).
  const std::vector<int>* batch_hash_ranks() const override {
    return world_hint_ > 0 ? &tracked_ranks_ : nullptr;  // an unknown world tracks the ranks it meets
  }

  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  // One step record of the series rank (NaN / -1 where the field was not logged).
  struct Row {
    int64_t step = 0;
    double t = kNaN, loss = kNaN, lr = kNaN, grad_norm = kNaN, zero_frac = kNaN, loss_scale = kNaN,
           update_norm = kNaN;
    int8_t overflow = -1, skipped = -1;
  };
  struct Event {
    std::string name, detail;
    int64_t step = 0;
    double t = kNaN;
  };
  struct Rank {
    int64_t step_records = 0, max_step = -1;
    double reached_t = kNaN, last_step_t = kNaN;   // when max_step was first logged; the last step record
    double longest_gap_s = 0;                      // between consecutive step records
    int64_t gap_before_step = -1;                  // the step record that ended that gap
    // the longest run of consecutive step records with one logged step while t advanced
    int64_t stuck_records = 0, stuck_step = -1;
    double stuck_from_t = kNaN, stuck_to_t = kNaN;
    int64_t heartbeats = 0, hb_step = -1;
    double hb_t = kNaN;
    std::string hb_phase;
    int64_t errors = 0;
    double error_t = kNaN, run_end_t = kNaN;
    std::string error_detail;                      // the first error's
    int64_t norms = 0, zero_norms = 0, first_zero_step = -1, last_nonzero_step = -1, finite_norms = 0;
    double norm_sum = 0;                           // of the finite ones
    std::array<double, kWindow> last_norms{};      // ring of the last kWindow local grad norms
    double compute_ms_sum = 0;                     // step_ms - comm_ms
    int64_t timed = 0;
    // current-run bookkeeping
    double prev_t = kNaN;
    int64_t prev_step = std::numeric_limits<int64_t>::min(), same_run = 0;
    double same_from_t = kNaN;
    // the local grad norms of the last min(norms, kWindow) step records, oldest first
    std::vector<double> window() const;
  };
  // Local grad norm across ranks at the n-th step record of each rank.
  struct Across {
    int64_t step = 0;
    double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity(), sum = 0;
    int32_t n = 0, zeros = 0;
  };
  // What one tracked rank's next hashed record was, right after a resume.
  struct AfterResume {
    int64_t step = 0, first_step = -1;  // first_step: when this batch was first trained (-1: new batch)
    uint64_t hash = 0;
  };
  // Consecutive hashed records of a tracked rank that each repeat a batch first trained at another step.
  struct Stretch {
    int64_t from_step = 0, to_step = 0, records = 0, src_lo = 0, src_hi = 0;
  };
  struct Tracked {
    int rank = 0;
    int64_t hashed = 0, repeats = 0, reruns = 0, stretches = 0;
    std::vector<Stretch> first_stretches;      // the first kStretchesKept
    std::vector<std::vector<AfterResume>> after_resume;  // per resume of this rank
    std::unordered_map<uint64_t, int64_t> first_seen;    // hash -> the step it was first trained at
    bool in_stretch = false;
    Stretch cur;
    int pending_after = 0;                     // records still to list after the latest resume
  };
  static constexpr size_t kStretchesKept = 4;

  const std::vector<Row>& rows() const { return rows_; }
  int series_rank() const { return series_rank_; }
  const std::vector<Rank>& ranks() const { return ranks_; }   // index = rank (ranks never seen: empty)
  int world() const { return static_cast<int>(ranks_.size()); }
  const std::vector<Across>& across() const { return across_; }
  const std::vector<Tracked>& tracked() const { return tracked_; }
  const std::vector<Event>& events() const { return events_; }  // the series rank's, in order
  const std::vector<std::pair<double, int64_t>>& heartbeat_sample() const { return hb_sample_; }  // (t, step)
  const std::vector<std::pair<int64_t, double>>& evals() const { return evals_; }  // (step, eval loss)
  int64_t records() const { return records_; }
  int64_t heartbeats() const { return heartbeats_; }
  int64_t checkpoints() const { return checkpoints_; }  // checkpoint_save events of the series rank
  int64_t restarts() const;                               // resume events of the series rank
  double t_end() const { return t_end_; }                 // the latest t of any record (or end())
  int64_t last_step() const;                              // the largest logged step of any rank
  bool has_batch_hash() const { return hashed_; }
  bool has_local_norm() const { return local_norms_; }
  bool has_timing() const { return timed_; }
  // What the summary holds in memory, from its containers' capacities (hash nodes counted at 32 bytes,
  // libstdc++'s node of a pair<uint64, int64> plus its next pointer and cached hash; the allocator's
  // own overhead is not counted).
  size_t bytes() const;

 private:
  // What step() reads of a step record (NaN / -1 / false where the field was not logged).
  struct StepIn {
    int rank = 0;
    int64_t step = 0;
    double t = kNaN, loss = kNaN, lr = kNaN, grad_norm = kNaN, zero_frac = kNaN, loss_scale = kNaN,
           update_norm = kNaN, local = kNaN, compute_ms = kNaN;
    int8_t overflow = -1, skipped = -1;
    bool has_local = false, has_times = false, has_hash = false;
    uint64_t hash = 0;
  };
  Rank& rank(int r);
  void step(const StepIn& r, Rank& k);
  void lockstep_row(const StepBlock& b, size_t i, Rank& k);
  void local_norm(Rank& k, int64_t ordinal, int64_t s, double v);  // a step's local grad norm
  // The fields lockstep_row reads (a block in lockstep whose rows all carry them takes it).
  static constexpr uint64_t kFastFields = StepBlock::kLocalGradNorm | StepBlock::kStepMs | StepBlock::kCommMs;
  void series(const StepIn& r);
  void track(const StepIn& r, Tracked& tr);
  void heartbeat(double t, int64_t step, std::string_view phase, Rank& k);
  void event(const Record& r, Rank& k);

  int world_hint_;
  std::vector<Rank> ranks_;
  std::vector<int> tracked_index_;   // rank -> index in tracked_, -1
  std::vector<Tracked> tracked_;
  std::vector<int> tracked_ranks_;   // the ranks of tracked_, in order
  std::vector<Row> rows_;
  int series_rank_ = -1;
  std::vector<Across> across_;
  std::vector<Event> events_;
  std::vector<std::pair<double, int64_t>> hb_sample_;
  uint64_t hb_stride_ = 1, hb_seen_ = 0;
  std::vector<std::pair<int64_t, double>> evals_;
  int64_t records_ = 0, heartbeats_ = 0, checkpoints_ = 0;
  double t_end_ = 0;
  bool hashed_ = false, local_norms_ = false, timed_ = false;
};

}  // namespace flatline
