// StepBlock: telemetry records as columns (docs/DESIGN.md §3 "Blocks"). A stretch of one stream: its step
// records as rows of arrays (step, opt_step, loss, lr, grad norms, scale, flags, batch hash, ...), and the
// heartbeats among them folded into runs of one rank, phase and step. The fleet simulator writes one
// step of every rank as a block, in place (sim/simulate/walk.h); the detectors read blocks in passes over
// the columns, with their per-rank state in arrays (detectors/detector.h). Any stream of Records becomes
// blocks through append() and comes back through for_each_record(), so a live run, a recorded log and the
// simulator go through the same detector code and get the same verdicts.
//
// Order: rows are in stream order; a heartbeat run sits before the row numbered `row` (row == rows():
// after the last one). So the block is the stream itself, each rank's own order kept, and folding loses
// nothing: a run's times are t0, t0 + dt, (t0 + dt) + dt, ... in double arithmetic, exactly what a
// watchdog that adds its interval writes; append() extends a run only when the next heartbeat's t is
// exactly that (else it opens a new one).
// Events and eval records are not part of a block: a stream hands them over one by one between blocks.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/record.h"

namespace flatline {

// The watchdog's phases (§3) as small ids, so a heartbeat costs no string compare once classified. Other
// names (a foreign log's) get ids from kOtherPhase up: StepBlock::phase_names[id - kOtherPhase].
enum PhaseId : uint8_t { kPhaseData, kPhaseCompute, kPhaseCollective, kPhaseOptimizer, kPhaseCheckpoint, kPhaseEval,
                         kPhaseNone, kOtherPhase };
inline const char* const kPhaseNames[] = {"data", "compute", "collective", "optimizer", "checkpoint", "eval", ""};
inline uint8_t known_phase(std::string_view p) {  // kOtherPhase when not one of the watchdog's
  switch (p.size()) {
    case 0: return kPhaseNone;
    case 4: return p == "data" ? kPhaseData : p == "eval" ? kPhaseEval : kOtherPhase;
    case 7: return p == "compute" ? kPhaseCompute : kOtherPhase;
    case 9: return p == "optimizer" ? kPhaseOptimizer : kOtherPhase;
    case 10: return p == "collective" ? kPhaseCollective : p == "checkpoint" ? kPhaseCheckpoint : kOtherPhase;
    default: return kOtherPhase;
  }
}

struct StepBlock {
  // Bits of `flags`: the optional fields of a step record (record.h) that a row carries, and the values
  // of its two boolean fields.
  static constexpr uint64_t kOptStep = 1u << 0, kLoss = 1u << 1, kLossAvg = 1u << 2, kLr = 1u << 3,
                            kGradNorm = 1u << 4, kLocalGradNorm = 1u << 5, kGradZeroFrac = 1u << 6,
                            kParamNorm = 1u << 7, kUpdateNorm = 1u << 8, kLossScale = 1u << 9, kOverflow = 1u << 10,
                            kSkipped = 1u << 11, kBatchHash = 1u << 12, kEpoch = 1u << 13, kSamplesSeen = 1u << 14,
                            kStepMs = 1u << 15, kCommMs = 1u << 16, kParamMismatches = 1u << 17;
  static constexpr uint64_t kOverflowValue = 1u << 20, kSkippedValue = 1u << 21;  // overflow / skipped is true
  static constexpr uint64_t kAllFields = (1u << 18) - 1;
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  // ---- step rows. A value the row does not carry: its bit of `flags` is 0, a double column holds NaN,
  // an integer column 0. Every column 64 bits wide, so that a pass over several vectorises without
  // widening.
  std::vector<int32_t> rank;
  std::vector<int64_t> step;
  std::vector<double> t;  // NaN when the record has none
  std::vector<uint64_t> flags;  // Field bits: what the row carries; overflow and skipped as values
  std::vector<int64_t> opt_step, epoch, samples_seen, param_mismatches;
  std::vector<double> loss, loss_avg, lr, grad_norm, local_grad_norm, grad_zero_frac, param_norm, update_norm,
      loss_scale, step_ms, comm_ms;
  std::vector<uint64_t> batch_hash;
  bool overflow(size_t i) const { return flags[i] & kOverflowValue; }  // false when not logged
  bool skipped(size_t i) const { return flags[i] & kSkippedValue; }

  // ---- heartbeats: n of one rank, with one phase and step, at t0, t0 + dt, ... (t_last the n-th).
  struct Beats {
    int32_t rank = 0;
    uint8_t phase = kPhaseNone;
    int32_t n = 0;
    uint32_t row = 0;  // before step row `row` of the block (rows(): after the last)
    int64_t step = 0;
    double t0 = kNaN, dt = 0, t_last = kNaN;
  };
  std::vector<Beats> beats;
  std::vector<std::string> phase_names;  // names of the ids from kOtherPhase up

  // ---- what every row shares, for passes that can then skip a test per row (set by seal())
  uint64_t all_has = 0;     // the fields every row carries
  bool lockstep = false;    // rows are ranks 0..rows()-1 in order, all at one step, each with a finite t
  double t_max = kNaN;      // the latest t of a row (NaN: none has one)

  size_t rows() const { return rank.size(); }
  bool empty() const { return rank.empty() && beats.empty(); }
  void clear();
  // n rows: the rows already there keep their values, new ones have every value absent (the simulator
  // fills the columns in place, then sets all_has and lockstep or calls seal()).
  void resize(size_t n);
  // Sets all_has, lockstep and t_max from the rows.
  void seal();

  // Appends a step record (a new row) or a heartbeat (onto the last run when it continues it); false,
  // and nothing appended, for an event or an eval record. seal() before the block is read.
  bool append(const Record& r);
  // A heartbeat run of n beats (the simulator's watchdog: t0 + k x dt), before the next row appended.
  void add_beats(int rank, uint8_t phase, int64_t step, double t0, double dt, int n);
  uint8_t phase_id(std::string_view name);  // a phase name's id in this block (interned)
  std::string_view phase_name(uint8_t id) const {
    return id < kOtherPhase ? std::string_view(kPhaseNames[id]) : std::string_view(phase_names[id - kOtherPhase]);
  }

  // Row i (or a heartbeat of a run) back as a Record: what the stream held.
  void row_record(size_t i, Record& out) const;
  void beat_record(const Beats& b, double t, Record& out) const;
  // Every record in stream order: f(const Record&). The record passed is reused between calls.
  template <class F>
  void for_each_record(F f) const {
    Record r;
    size_t j = 0;
    for (size_t i = 0; i <= rows(); ++i) {
      for (; j < beats.size() && beats[j].row <= i; ++j) {
        const Beats& b = beats[j];
        double bt = b.t0;
        for (int k = 0; k < b.n; ++k, bt += b.dt) {
          beat_record(b, bt, r);
          f(static_cast<const Record&>(r));
        }
      }
      if (i == rows()) break;
      row_record(i, r);
      f(static_cast<const Record&>(r));
    }
  }
  size_t records() const;  // rows plus heartbeats
};

// Records in stream order handed on as blocks: each run of records a block takes (StepBlock::append)
// goes to on_block(const StepBlock&) sealed, and any other record (an event, an eval) to
// on_record(const Record&) between them, in order. `scratch` is cleared first and left holding the
// last block.
template <class OnBlock, class OnRecord>
void in_blocks(const Record* records, size_t n, StepBlock& scratch, OnBlock&& on_block, OnRecord&& on_record) {
  scratch.clear();
  for (size_t i = 0; i < n; ++i) {
    if (scratch.append(records[i])) continue;
    if (!scratch.empty()) {
      scratch.seal();
      on_block(static_cast<const StepBlock&>(scratch));
      scratch.clear();
    }
    on_record(records[i]);
  }
  if (!scratch.empty()) {
    scratch.seal();
    on_block(static_cast<const StepBlock&>(scratch));
  }
}

}  // namespace flatline
