// Drill views: what each drill signal prints, rendered from a RunSummary (report/run_summary.h) as a
// text plot and a table (docs/DESIGN.md §12). Nothing here walks records: every view reads the
// summary, so an answer costs microseconds to milliseconds whatever the run's size (bench_drill).
// Per-rank tables list every rank in a small world (up to kRowsPerRank ranks); a fleet gets the
// range across ranks and the ranks that stand out (at most kOutliers named), never 1024 rows.
#pragma once
#include <string>
#include <vector>

#include "report/run_summary.h"
#include "report/signals.h"

namespace flatline {

constexpr int kRowsPerRank = 16;  // worlds up to this size get one table row per rank
constexpr int kOutliers = 8;      // ranks named as standing out, at most

// The series rank's column of a step field by name: loss, lr, grad_norm, grad_zero_frac, loss_scale,
// update_norm (x = logged step, in record order: a restart makes x go back).
Series summary_series(const RunSummary& s, const std::string& field);

std::string loss_view(const RunSummary& s);   // the training-loss plot (the drill's intro and `loss`)
std::string alive_view(const RunSummary& s);  // step vs wall clock, heartbeats, ends, per-rank liveness
std::string lr_view(const RunSummary& s);
std::string grad_view(const RunSummary& s);
std::string ranks_view(const RunSummary& s);  // local grad norm across ranks, zero and slow ranks
std::string data_view(const RunSummary& s);   // batch fingerprints: repeats, re-runs, after each restart
std::string scale_view(const RunSummary& s);
std::string eval_view(const RunSummary& s);
// One of the drill signals (drill_signals(), report/drill.h) by name; "" for an unknown one.
std::string signal_view(const RunSummary& s, const std::string& signal);

// "value on N ranks, other on ranks 3, 9" for per-rank values grouped by equality, the largest group
// first; rank lists are cut after kOutliers with "(+k more)". `of` = the ranks considered: a group of
// all of them reads "on every rank".
std::string group_ranks(const std::vector<std::pair<std::string, int>>& value_rank, int of);
// `s` cut to at most n characters, "..." marking a cut.
std::string shorten(const std::string& s, size_t n);
// "3, 9, 17 (+4 more)"
std::string rank_list(const std::vector<int>& ranks, size_t at_most = kOutliers);

}  // namespace flatline
