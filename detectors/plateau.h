// Plateau: is the training loss still descending against its own noise? Not a cause (a converged
// model plateaus too) but the symptom the checklist explains; Triage reports it beside the causes.
//
// Signal: loss_avg of step records (mean over ranks), or `loss` of the lowest rank when loss_avg is
//   absent; one value per step: a step logged again (a restart) replaces the earlier value. A log with
//   no training loss at all (validation rows only) is judged on its eval losses instead.
// Window: the last W = 40 steps with a value, split into an older and a newer half.
// Warm-up: unknown until kMinValues (10) values exist. A sparse log (a loss once per epoch: 10 to W
//   values in all) is judged on every value it has, split the same way, and says so (sparse, values):
//   fewer values give a larger standard error, so only a clearly flat loss is called flat, and the
//   triage lowers its confidence.
// Threshold: flat when drop = mean(older half) - mean(newer half) is < 2 standard errors of that
//   difference, se = sigma * sqrt(1/n_old + 1/n_new), sigma = the spread of the window's values
//   around a least-squares line (so a steady descent is not mistaken for noise). flat_since: the
//   judged span grows back from the latest window (stride 5 steps) until 2 spans in a row descend by
//   more than 3 standard errors (the knee is in them). 3 rather than 2: overlapping spans share their
//   noise, so a 2-SE chance excursion inside a flat stretch lasts several strides (seen in tests).
// Never descended: flat now, and the mean of the last window is not below the mean of the first 20
//   values ever seen (a sparse log: its first quarter, at least 3) by more than 3 standard errors of
//   their difference (the head is kept aside, so
//   a run longer than the values kept is still compared with its start). A loss that sat where it
//   started is the unexplained_plateau verdict's first sign (triage.h), a loss that descended and
//   then flattened is not.
// False-positive guard: none needed beyond the noise estimate: a flat loss is reported, not
//   diagnosed; the checklist says why.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "telemetry/record.h"

namespace flatline {

struct PlateauStatus {
  bool known = false;        // enough loss values to judge
  bool flat = false;         // loss no longer descending beyond its noise
  int64_t flat_since = -1;   // step where the flat stretch began
  bool never_descended = false;  // flat, and no lower than where it started (plateau.h)
  double level = 0;          // mean of the newer half of the last window
  double level_se = 0;       // its standard error
  int64_t first_step = -1, judged_step = -1;  // the first loss value's step; the step of the W-th
  int values = 0;            // loss values judged: the window, or all there are in a sparse log
  bool sparse = false;       // fewer values than a full window (plateau.h): a less certain judgement
  double noise = 0;          // the spread of the judged values around their line
  std::string detail;        // e.g. "loss 2.31 -> 2.30 over steps 300..400, noise 0.04: flat"
};

class Plateau {
 public:
  explicit Plateau(int window = 40) : window_(window < 4 ? 4 : window) {}
  void observe(const Record& r);
  PlateauStatus status() const;
  int window() const { return window_; }
  bool eval_only() const { return eval_only_; }  // judged on held-out losses: the log has no training loss

 private:
  struct Value {
    int priority;  // the lowest rank's loss_avg, else the lowest rank's own loss; a tie is a restart: the later wins
    double v;
  };
  void observe_value(const Record& r);
  int window_;
  bool train_seen_ = false, eval_only_ = false;
  std::map<int64_t, Value> series_;  // step -> value
  // The entry of the last step seen: every rank's record of a step arrives in a row, and at fleet scale
  // a map lookup per record was a sixth of the triage's cost.
  std::map<int64_t, Value>::iterator last_;
  bool has_last_ = false;
  // The first kHead values in step order as they arrived (the start of the run, kept aside).
  std::vector<std::pair<int64_t, double>> head_;
};

}  // namespace flatline
