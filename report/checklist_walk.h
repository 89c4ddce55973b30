// Checklist walk: the five checks of docs/DESIGN.md §2, read off a RunSummary the way a person reads the
// drill's views, for `flatline drill --explain`: each check, what it showed on this run, and whether and
// why it rules its cause in or out. The rules are the detectors' thresholds applied to the whole run at
// once (the detectors in detectors/ apply them record by record, live); the explanation prints the
// detectors' own verdict beside each check, so a disagreement is visible rather than hidden.
//
//   alive  rules run_not_alive in when any rank wrote an `error` event; or a rank with no run_end has no
//          step record in the last max(10 s, 3 typical steps + 1 heartbeat interval) of the run while
//          the run's records went on; or one logged step was repeated by 3+ consecutive step records
//          while t advanced (detectors/run_not_alive.cpp: stale logging). Cannot tell without times.
//   lr     rules lr_zero in when, after the peak, lr stays below 0.1% of the peak on the last 2+ step
//          records to the end, or lr was 0 on 3+ records and never above (a warmup stuck at lr(0))
//          (detectors/lr_zero.cpp). Cannot tell without lr.
//   data   rules data_replay in when a tracked rank trained 2+ consecutive batches first trained at
//          another step (a restart's re-run of the same step with the same batch is not a repeat;
//          detectors/data_replay.cpp). Cannot tell without batch_hash.
//   scale  rules loss_scale_collapse in when, at the last step record, the loss scale is < 1 and the
//          fp16 gradients underflowed (zero fraction > 0.5, or grad norm 0), or when 10+ consecutive
//          steps were skipped after the first applied one (detectors/loss_scale_collapse.cpp (b) and
//          its blind streak). Rules it out for a run that is not fp16 (loss scale 1, no overflow).
//   ranks  rules zero_grad_rank in when a rank's last 2 local grad norms are <= 1e-12 while the median
//          of the ranks' is > 0 (detectors/zero_grad_rank.cpp). Cannot tell in a world of one rank or
//          without local_grad_norm.
// The walk names the first check in checklist order that rules its cause in (a dead run makes every
// later signal stale), else healthy.
#pragma once
#include <string>
#include <vector>

#include "detectors/triage.h"
#include "report/run_summary.h"

namespace flatline {

enum class Reading { rules_in, rules_out, cannot_tell };
const char* to_string(Reading r);

struct CheckWalk {
  std::string cause;   // the checklist row (run/causes.h)
  std::string signal;  // its drill signal
  Reading reading = Reading::cannot_tell;
  std::string showed;  // what the view showed on this run, with its numbers
  std::string why;     // the rule, and how this run meets it or not
  std::vector<int> ranks;  // ranks it names (zero_grad_rank), else empty
};

// One entry per checklist row, in checklist order.
std::vector<CheckWalk> walk_checklist(const RunSummary& s);
// The cause the walk names: the first rules_in, else "healthy"; `rank` gets its rank where it names one.
std::string walk_verdict(const std::vector<CheckWalk>& w, int* rank = nullptr);

// The text of `--explain`: every check (what it showed, in or out and why, the detectors' state of the
// same check), the walk's verdict, the detectors' diagnosis and the truth.
std::string explain_text(const std::vector<CheckWalk>& w, const Diagnosis& detectors, const std::string& truth);

}  // namespace flatline
