// Walk: the fleet simulator's state while it walks a scenario (simulator.h). Per-rank state is a few
// vectors of length world_size (O(ranks) memory). Records are built in place in a block of kBlock
// slots that goes to the sink whole (RecordSink::write_block): no copy per record.
#pragma once
#include <memory>
#include <vector>

#include "faults/effects.h"
#include "sim/simulate/model.h"
#include "sim/simulate/simulator.h"

namespace flatline::simdetail {

class Walk {
 public:
  Walk(const Scenario& s, const SimOptions& o, RecordSink& sink);
  SimResult run();

 private:
  struct Train {  // what a checkpoint restores (model progress, counters and scaler, sampler, loggers)
    TrainCounters c;                // shared by every rank (they step in lockstep)
    double progress = 0;            // the model's training progress (model.h)
    int64_t sampler_index = 0;      // the sampler's next global batch
    int64_t max_index = -1;         // the highest global batch trained so far (a lower one is a replay)
    std::vector<LoggedStep> logged; // per rank
  };

  void actions(int64_t step);            // fills act_ for every rank class
  const StepActions& act(int r) const { return cls_[r] < 0 ? generic_ : targeted_[cls_[r]]; }
  void step(int64_t s);                  // one optimizer step on every rank
  void hang(int64_t s, int hung_rank);   // a block past the collective timeout: the run ends
  void stall(int64_t s, double bound);
  void pause(const char* phase, double seconds, int64_t s);  // eval / checkpoint: heartbeats only
  void event(int r, const char* name, int64_t s, double t, const std::string& detail = "");
  void beats_until(int r, double until, int64_t s);  // heartbeats of rank r inside the current step
  const char* phase_at(int r, double t) const;       // the watchdog's phase of rank r at t
  void heartbeat(int r, double t, int64_t s, const char* phase);
  // The next slot of the block, holding a record of kind k with no field of another kind set; the
  // caller sets every field of its kind, then calls emitted(). A full block goes to the sink first.
  Record& slot(RecordKind k);
  void emitted(const Record& r);                     // to the onset clock, counted
  void flush();                                      // the block to the sink

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
  StepActions generic_;
  std::vector<StepActions> targeted_;
  std::vector<double> next_hb_, compute_, loss_;
  std::vector<char> replay_;             // the rank trains on a batch already trained on
  std::vector<int64_t> ids_, global_ids_;  // one rank's batch; the whole global batch of the step
  // the step being emitted (for the heartbeat phase)
  double step_t0_ = 0, cmax_ = 0;
  static constexpr size_t kBlock = 16384;
  std::vector<Record> block_;
  size_t n_ = 0;
  SimResult res_;
  OnsetClock onsets_;
};

}  // namespace flatline::simdetail
