// Signals: the series and tables a person reads when a loss goes flat, computed from one run's
// telemetry (docs/DESIGN.md §2, "first signal to read"). Shared by the terminal drill
// (text plots and tables) and the HTML report (gnuplot SVG), so both show the same numbers.
// Step-indexed series come from rank 0 (or the lowest rank that has the field); x is the logged step,
// in record order (a restart makes x go back, as it did in the run).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "report/run_data.h"

namespace flatline {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool empty() const { return x.empty(); }
};

// The field of a step record, by name: loss (loss_avg, else loss), lr, grad_norm, local_grad_norm,
// loss_scale, grad_zero_frac, update_norm.
Series step_series(const RunData& run, const std::string& field, int rank = -1);
Series eval_loss(const RunData& run);                     // kind eval records, lowest rank
std::vector<Series> local_grad_norms(const RunData& run);  // one per rank, named "rank r"
// x = t (s), y = logged step: every rank's heartbeats (the step they name), then one series per rank
// (drawn over the heartbeats).
std::vector<Series> step_vs_time(const RunData& run);
// Logged-step progress per second over time (rank 0), in `bins` equal time bins up to the last record:
// 0 where the run hung or the logged step stopped moving.
Series step_rate(const RunData& run, int bins = 60);

// Tables (plain text, fixed-width columns) for the drill and the report.
std::string liveness_table(const RunData& run);   // per rank: last step, last heartbeat, end, largest gap
std::string ranks_table(const RunData& run);      // per rank: median local grad norm early/late, zero steps
std::string data_table(const RunData& run);       // batch fingerprints: distinct, repeats, first repeats
std::string scale_table(const RunData& run);      // loss scale range, overflows, skipped steps
std::string eval_table(const RunData& run);       // eval loss per eval step

}  // namespace flatline
