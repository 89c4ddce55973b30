// Walk: the fleet simulator's state while it walks a scenario (simulator.h). Per-rank state is a few
// vectors of length world_size (O(ranks) memory). A logged step is written as one StepBlock
// (telemetry/block.h): a row per rank, filled column by column in place, with each rank's heartbeats of
// the step before its row; heartbeats outside a logged step (pauses, a hang, a stall, an unlogged step)
// go in a block of heartbeats alone; events and eval records go to the sink one by one between blocks.
#pragma once
#include <memory>
#include <vector>

#include "faults/effects.h"
#include "sim/simulate/model.h"
#include "sim/simulate/simulator.h"
#include "telemetry/block.h"

namespace flatline::simdetail {

// Hands the simulator's output to a sink on another thread, in order (simulator.cpp): a logged step's
// block by swapping it with a block the consumer has finished with (no copy), the rest as copies.
class Handoff {
 public:
  virtual ~Handoff() = default;
  virtual void rows(StepBlock& b) = 0;  // takes b's contents; leaves b with a spent block's
};

class Walk {
 public:
  Walk(const Scenario& s, const SimOptions& o, RecordSink& sink, Handoff* handoff = nullptr);
  SimResult run();

 private:
  struct Train {  // what a checkpoint restores (model progress, counters and scaler, sampler, loggers)
    TrainCounters c;                // shared by every rank (they step in lockstep)
    double progress = 0;            // the model's training progress (model.h)
    int64_t sampler_index = 0;      // the sampler's next global batch
    int64_t max_index = -1;         // the highest global batch trained so far (a lower one is a replay)
    std::vector<int64_t> logged_step;  // per rank: what its logger shows (RunPlan::log's LoggedStep)
    std::vector<double> logged_loss;
  };

  void actions(int64_t step);            // fills act_ for every rank class
  const StepActions& act(int r) const { return cls_[r] < 0 ? generic_ : targeted_[cls_[r]]; }
  double compute_of(const StepActions& a, double g) const;  // a rank's forward + backward ms
  void step(int64_t s);                  // one optimizer step on every rank
  struct StepValues {  // what a logged step's records carry besides the per-rank columns
    int64_t s, index;
    double loss_avg, t_end;
    uint64_t flags;  // StepBlock's: every field, overflow and skipped as logged
    double gn, zero_frac, lr, grad_norm, param_norm, update_norm, scale_used, step_ms;
  };
  void log_all(const StepValues& v);     // the step's records of every rank
  void log_some(const StepValues& v);    // of the output ranks alone
  void hand_off(StepBlock& c);           // a logged step's block, counted, to the sink
  void fill_rows(int64_t s, int64_t index, double loss_avg, double t_end);  // the step's records
  // The same for the output ranks alone (SimOptions::output_ranks), one at a time.
  void fill_some(int64_t s, int64_t index, double loss_avg, double t_end, const uint64_t flags, double gn,
                 double zero_frac);
  bool writes(int r) const { return all_out_ || out_[static_cast<size_t>(r)]; }
  void hang(int64_t s, int hung_rank);   // a block past the collective timeout: the run ends
  void stall(int64_t s, double bound);
  void pause(const char* phase, double seconds, int64_t s);  // eval / checkpoint: heartbeats only
  void event(int r, const char* name, int64_t s, double t, const std::string& detail = "");
  void write(const Record& r);           // an event or eval record, after the heartbeats before it
  // Heartbeats of rank r up to `until` in step s, into block b before its row `row`.
  // (inlined: at fleet scale a step's loop over the ranks calls it for a third of them)
  __attribute__((always_inline)) inline void beats_until(StepBlock& b, uint32_t row, int r, double until, int64_t s);
  __attribute__((always_inline)) inline uint8_t phase_at(int r, double t) const;  // the watchdog's phase of rank r at t
  void flush_beats();                       // the heartbeats alone (outside a logged step) to the sink
  void finish_run();                        // the last heartbeats, the sink's end and the onsets
  void ready_rows();                        // rows_: world_ rows, the constant columns set

  const Scenario& sc_;
  RecordSink& sink_;
  RunPlan plan_;
  FleetSampler sampler_;
  int world_;
  uint64_t seed_;
  double compute_ms_, comm_ms_, hb_s_, nparams_;
  Train tr_, saved_;
  int64_t saved_step_ = -1;
  bool resumed_ = false;
  double t_ = 0;
  // per rank
  std::vector<int> cls_;                 // index into targeted_, -1: generic
  std::vector<int> targeted_ranks_;
  int first_untargeted_ = 0;             // the lowest rank no fault targets (world_ if none)
  StepActions generic_;
  std::vector<StepActions> targeted_;
  std::vector<double> next_hb_, compute_, loss_, draws_;
  std::vector<uint32_t> due_;            // the ranks with a heartbeat due in the step (lanes.h due_ranks)
  std::vector<char> replay_;             // the rank trains on a batch already trained on
  std::vector<int64_t> ids_, slot_ids_;  // one rank's batch; every rank's by position in the batch
  std::vector<int> onset_ranks_;         // the ranks whose step records OnsetClock reads
  std::vector<LoggedStep> logged_before_;  // the targeted ranks' loggers before this step
  // the step being emitted (for the heartbeat phase)
  double step_t0_ = 0, cmax_ = 0;
  StepBlock rows_, beats_;               // a logged step; heartbeats alone
  Handoff* handoff_;                     // where a logged step's block goes when not to sink_
  const std::vector<int>* hash_ranks_;   // the ranks whose batches are hashed (nullptr: all)
  // the ranks that write records (SimOptions::output_ranks): all, or out_list_ (ascending), out_[r] set
  bool all_out_ = true;
  std::vector<int> out_list_;
  std::vector<char> out_;
  Record rec_;                           // an event or eval record being written
  SimResult res_;
  OnsetClock onsets_;
};

}  // namespace flatline::simdetail
