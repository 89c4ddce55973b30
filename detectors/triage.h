// Triage: runs every detector over one stream of records and walks the checklist in order
// (run_not_alive, lr_zero, data_replay, loss_scale_collapse, zero_grad_rank) to produce a Diagnosis.
// The diagnosis names the first cause in checklist order that fired (a dead run makes every later
// signal stale), and lists every other finding, so overlapping faults are all reported.
// It also reports the plateau check: is the training loss still descending against its own noise.
// Detectors registered beyond the checklist (e.g. straggler) run too; their findings are listed after
// the checklist's and name the diagnosis only when no checklist cause fired.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "detectors/detector.h"

namespace flatline {

struct PlateauStatus {
  bool known = false;        // enough loss values to judge
  bool flat = false;         // loss no longer descending beyond its noise
  int64_t flat_since = -1;   // step where the flat stretch began
  std::string detail;        // e.g. "loss 2.31 -> 2.30 over steps 300..400, noise 0.04: flat"
};

struct Diagnosis {
  std::string cause = "healthy";
  int rank = -1;
  int64_t onset_step = -1;
  int64_t detected_step = -1;
  double detected_t = std::numeric_limits<double>::quiet_NaN();
  double confidence = 0;
  std::vector<std::string> evidence;
  std::vector<Finding> findings;     // every detector that fired, checklist order
  std::vector<CheckResult> checklist;  // one per cause, checklist order
  std::vector<CheckResult> extra_checks;  // detectors beyond the checklist (straggler), by name
  PlateauStatus plateau;
  int64_t records = 0;
  int64_t last_step = -1;
  // Step records whose loss or loss_avg is NaN or inf: counted and reported, because the plateau check
  // (and any reader of the curve) skips them. A diverged run is not a plateau, but it must not vanish.
  int64_t nonfinite_losses = 0;
  int64_t first_nonfinite_step = -1;
  int first_nonfinite_rank = -1;
};

class Triage {
 public:
  explicit Triage(DetectorConfig cfg = {});
  ~Triage();
  void observe(const Record& r);
  // Observes a block of records (same result as observing them one by one). On a machine with more
  // than one core and a block of >= 4096 records, the detectors run on two threads, each group over
  // the whole block (detectors are independent; each sees the records in order); findings are then
  // announced in checklist order at the end of the block rather than the record where they fired.
  void observe_block(const Record* records, size_t n);
  void observe_block(const std::vector<Record>& block) { observe_block(block.data(), block.size()); }
  // The stream's clock reached `now` (run time) with no further record (detector.h); the live
  // launcher calls it every poll.
  void advance(double now);
  void finish(double t_end);
  Diagnosis diagnosis() const;
  // Called once per detector, the first time it fires (for live and replay printing).
  void on_finding(std::function<void(const Finding&)> cb);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string to_text(const Diagnosis& d);  // human-readable, multi-line
std::string to_json(const Diagnosis& d);  // one JSON object

}  // namespace flatline
