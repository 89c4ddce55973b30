// Drill: the interview-style practice session behind `flatline drill` (issue 6). A hidden recorded run
// is shown as its training-loss curve; the trainee asks for one signal at a time and then answers with
// a cause (and a rank where it applies). Terminal-agnostic: commands in, text out, time from an
// injected clock, so that scripted sessions and tests give exact scores.
//
// Commands: alive | lr | grad | ranks | data | scale | eval (the signals), loss, help,
//           answer <cause> [rank], quit.
// Score (100 points, only when an answer is given):
//   cause    50  right cause and, for zero_grad_rank with a known rank, the right rank (25 if only the
//                cause is right)
//   alive    15  liveness (`alive`) read before any model signal (lr grad ranks data scale eval)
//   lr       10  lr read before answering
//   grad     10  grad norm read before answering
//   signals  10  distinct signals read: 10 up to 4, then 3 less for each extra one (0 from 8)
//   time      5  5 within 120 s, 3 within 300 s, else 0
#pragma once
#include <functional>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "report/run_data.h"

namespace flatline {

// The signals in the order a person should read them (liveness first).
const std::vector<std::string>& drill_signals();
// The signal that carries a cause's evidence ("lr_zero" -> "lr"); "" for healthy.
std::string evidence_signal(const std::string& cause);
// Which of n recorded runs a seed picks (splitmix64, the same on every platform).
size_t drill_pick(size_t n, uint64_t seed);

struct DrillScore {
  bool answered = false;
  std::string answer_cause;
  int answer_rank = -1;
  std::string truth_cause = "healthy";
  int truth_rank = -1;
  bool cause_right = false, rank_right = false;
  bool alive_first = false, read_lr = false, read_grad = false;
  std::vector<std::string> read;    // distinct signals read, in first-read order
  std::vector<std::string> missed;  // evidence-bearing signals not read
  double seconds = 0;
  int cause_pts = 0, alive_pts = 0, lr_pts = 0, grad_pts = 0, signals_pts = 0, time_pts = 0, total = 0;
};

class Drill {
 public:
  // `run` must have a manifest (the hidden truth). `now_s` returns seconds on any monotonic clock.
  Drill(RunData run, std::function<double()> now_s);
  std::string intro() const;                  // what the run is (not its name), the loss plot, help
  std::string handle(const std::string& line);  // one command; returns what to print
  void finish();                              // input ended or quit: ends the drill without an answer
  bool done() const { return done_; }
  const DrillScore& score() const { return score_; }
  std::string summary() const;                // the truth, the evidence, what was missed, the score

 private:
  std::string show(const std::string& signal) const;
  void answer(const std::string& cause, int rank);
  RunData run_;
  std::function<double()> now_;
  double t0_ = 0;
  bool done_ = false, touched_model_ = false;
  DrillScore score_;
};

// The prompt loop: reads commands from `in` until an answer, quit or end of input, writes to `out`.
// With `echo`, each command is printed after the prompt (scripted sessions read like a terminal).
// Returns 0 when the answer was right, 1 otherwise.
int run_drill(Drill& d, std::istream& in, std::ostream& out, bool echo);

}  // namespace flatline
