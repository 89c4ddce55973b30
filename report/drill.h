// Drill: the interview question behind `flatline drill` (issues 6 and 12): "Training loss went flat at
// step 40k after descending normally. Walk me through how you debug it." A hidden run (report/drill_run.h:
// a simulated fleet run by default, or a recorded one) is shown as its training-loss curve; the trainee
// asks for one signal at a time (report/drill_views.h) and then answers with a cause (and a rank where
// it applies). Terminal-agnostic: commands in, text out, time from an injected clock, so that scripted
// sessions and tests give exact scores.
//
// Commands: alive | lr | grad | ranks | data | scale | eval (the signals), loss, help,
//           answer <cause> [rank], quit.
// The question is scored on three habits: checking that the run is alive before touching the model;
// reading the learning rate and the grad norm before forming a theory; and, when the job was restarted,
// looking at the data after the restart (a resumed loader can silently replay data). Points, only when
// an answer is given:
//   cause    50  right cause and, for a cause that names a rank (zero_grad_rank) with a known rank, the
//                right rank (25 if only the cause is right)
//   alive    15  liveness (`alive`) read before any model signal (lr grad ranks data scale eval)
//   lr       10  lr read before answering
//   grad     10  grad norm read before answering
//   signals  10  distinct signals read: 10 up to 4, then 3 less for each extra one (0 from 8)
//   time      5  5 within 120 s, 3 within 300 s, else 0
//   data     10  only on a run with a restart (a `resume` event in its telemetry): `data` read before
//                answering; such a run is scored out of 110, any other out of 100
#pragma once
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "report/drill_run.h"

namespace flatline {

// The signals in the order a person should read them (liveness first).
const std::vector<std::string>& drill_signals();
// The signal that carries a cause's evidence ("lr_zero" -> "lr"); "" for healthy.
std::string evidence_signal(const std::string& cause);

struct DrillScore {
  bool answered = false;
  std::string answer_cause;
  int answer_rank = -1;
  std::string truth_cause = "healthy";
  int truth_rank = -1;
  bool cause_right = false, rank_right = false;
  bool alive_first = false, read_lr = false, read_grad = false, read_data = false;
  bool restarted = false;           // the run was resumed from a checkpoint: the data habit is scored
  std::vector<std::string> read;    // distinct signals read, in first-read order
  std::vector<std::string> missed;  // evidence-bearing signals not read
  double seconds = 0;
  int cause_pts = 0, alive_pts = 0, lr_pts = 0, grad_pts = 0, signals_pts = 0, time_pts = 0, data_pts = 0, total = 0;
  int max_total = 100;              // 110 on a run with a restart
};

struct DrillOptions {
  bool explain = false;  // after the summary, the checklist walk of this run (report/checklist_walk.h)
};

class Drill {
 public:
  // `now_s` returns seconds on any monotonic clock. A run without a manifest is drilled as healthy.
  Drill(DrillRun run, std::function<double()> now_s, DrillOptions o = {});
  std::string intro() const;                    // the question, what the run is (not its name), the loss, help
  std::string handle(const std::string& line);  // one command; returns what to print
  void finish();                                // input ended or quit: ends the drill without an answer
  bool done() const { return done_; }
  bool detectors_ready() const { return run_.detectors_ready(); }
  // The score; the evidence missed needs the detectors' findings, so this waits for them.
  const DrillScore& score();
  std::string summary();                        // the truth, the evidence, what was missed, the score

 private:
  void answer(const std::string& cause, int rank);
  void settle();
  DrillRun run_;
  std::function<double()> now_;
  DrillOptions opt_;
  double t0_ = 0;
  bool done_ = false, touched_model_ = false, settled_ = false;
  DrillScore score_;
};

// The prompt loop: reads commands from `in` until an answer, quit or end of input, writes to `out`.
// With `echo`, each command is printed after the prompt (scripted sessions read like a terminal).
// Returns 0 when the answer was right, 1 otherwise.
int run_drill(Drill& d, std::istream& in, std::ostream& out, bool echo);

}  // namespace flatline
