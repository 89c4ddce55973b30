// The HTML report behind `flatline report` (docs/DESIGN.md §12): one self-contained page (inline CSS and SVG, no
// scripts, no external resources) for a run or a suite of runs. Per run: the truth (manifest), the
// diagnosis with its evidence and checklist, and six plots (loss train+eval, lr, grad norm, loss
// scale, per-rank local grad norm, step rate), each with the fault onset and the detection marked;
// when the run was confirmed (flatline confirm), the verdict with its numbers and both loss curves.
// For a suite: the scoreboard and confusion matrix (scoring/score.h) first, then a section per run.
// Every piece of text from a run (names, evidence, errors) is HTML-escaped.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "report/gnuplot.h"
#include "report/run_data.h"

namespace flatline {

std::string html_escape(std::string_view s);

// The plot specs of one run, in page order (kReportPlots of them), with onset/detection marks.
constexpr int kReportPlots = 6;
std::vector<PlotSpec> report_plots(const RunData& run);

// A confirmed run's plots (RunData::confirmation): the training loss of the run, of the run as it was
// replayed (the control) and of the repaired replay, by trained step, with the branch point and the
// compared steps marked; and the held-out loss of both branches when that is what was compared.
std::vector<PlotSpec> confirmation_plots(const RunData& run);

// The page: a suite when there is more than one run (or `suite` is set). Throws when gnuplot fails.
std::string html_report(const std::vector<RunData>& runs, const std::string& title, bool suite);

}  // namespace flatline
