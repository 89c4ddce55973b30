// Signals: the series a person reads when a loss goes flat, computed from one recorded run's telemetry
// held in memory (docs/DESIGN.md §2, "first signal to read"), for the HTML report (gnuplot SVG). The
// drill reads the same fields from a streamed summary instead (report/drill_views.h).
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

}  // namespace flatline
