// The progress of `flatline run` while it trains: step / total, loss, steps/s and ETA from the lowest
// rank's step records. On a terminal one line updated in place (carriage return, erase to the end of
// the line), at most kRedrawS apart; a live finding or any other line is printed above it. Elsewhere
// (a pipe, a CI log) plain lines, one each time another tenth of the steps is done, so a log stays
// short and readable. `flatline score` prints one line per run instead.
#pragma once
#include <cstdint>
#include <deque>
#include <ostream>
#include <string>
#include <utility>

#include "telemetry/record.h"

namespace flatline {

class Progress {
 public:
  static constexpr double kRedrawS = 0.2;   // terminal redraws at most this often
  static constexpr double kRateWindowS = 10; // steps/s over the last this many seconds
  Progress(std::ostream& out, bool tty, int64_t total_steps);
  void observe(const Record& r, double now_s);  // step records; `now_s` any monotonic clock
  void tick(double now_s);                      // redraws the terminal line when due
  void print_line(const std::string& line);     // a line of its own, above the progress line
  void done();                                  // ends the progress line (terminal)
  // "step 120/400  loss 2.310  9.8 steps/s  ETA 29 s" (what either mode shows).
  std::string text() const;

 private:
  void draw();
  std::ostream& out_;
  bool tty_;
  int64_t total_, step_ = 0;
  int rank_ = -1;                               // the lowest rank seen: its records drive the line
  double loss_ = -1, rate_ = 0, drawn_at_ = -1e300;
  int tenths_ = 0;                              // plain mode: tenths already printed
  bool shown_ = false, dirty_ = false;
  std::deque<std::pair<double, int64_t>> window_;  // (now, step)
};

}  // namespace flatline
