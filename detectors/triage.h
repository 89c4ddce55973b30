// Triage: runs every detector over one stream of records and walks the checklist in order
// (run_not_alive, lr_zero, data_replay, loss_scale_collapse, zero_grad_rank) to produce a Diagnosis.
// The diagnosis names the first cause in checklist order that fired (a dead run makes every later
// signal stale), and lists every other finding, so overlapping faults are all reported.
// It also reports the plateau check: is the training loss still descending against its own noise.
// Detectors registered beyond the checklist (e.g. straggler) run too; their findings are listed after
// the checklist's and name the diagnosis only when no checklist cause fired and the plateau is not
// unexplained.
//
// unexplained_plateau (docs/DESIGN.md §2): no checklist cause fired, and either
//   (1) the loss never descended (PlateauStatus::never_descended: flat from its first values), or
//   (2) the parameters do not move while lr and the gradients are not zero: update_norm == 0 (or
//       < 1e-9 x param_norm) on 3 consecutive applied steps with lr > 0 and grad_norm > 0: the
//       optimizer is not updating the model it trains (TrainCheck's flat-loss case;
//       huggingface/accelerate#2665, an FSDP optimizer holding the pre-wrap parameters). Without
//       update_norm, a param_norm identical on 10 such steps is evidence for (1), not a verdict (a
//       norm printed with 3 decimals stands still late in a healthy run).
//   The evidence names a loss equal to ln K (within min(0.02, 0.25 / K), K <= 1000, with a standard
//   error no larger than that: a uniform predictor over K classes), and lists the checks that could
//   not run with what to log for them. A loss that descended and then flattened with every runnable
//   check passing stays healthy (a converged model, the look-alikes). onset_step: the first loss
//   value (1) / the first frozen step (2); detected_step: the W-th loss value (1) / the 3rd (2).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "detectors/detector.h"
#include "detectors/plateau.h"

namespace flatline {

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
// A run's diagnosis.json back (the verdict, its evidence, the plateau, the last step; findings and the
// checklist are not read back). Throws std::runtime_error naming `source` and the field for bad input.
Diagnosis diagnosis_from_json(const std::string& text, const std::string& source);

}  // namespace flatline
