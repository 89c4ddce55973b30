// gnuplot as the report's plotting tool: plot specs in, inline <svg> elements out. One gnuplot child
// process renders all the plots of a call (its SVG terminal, one output file per plot), reading the
// data from files in a private temporary directory that is removed afterwards. Text goes to gnuplot
// in single-quoted strings with enhanced text off, so names like lr_zero print as written.
#pragma once
#include <string>
#include <vector>

#include "report/signals.h"

namespace flatline {

struct PlotMark {   // a vertical line across the plot at x, e.g. the fault onset or the detection
  double x = 0;
  std::string label, color;  // color: "#rrggbb"
};

struct PlotSpec {
  std::string title, x_label, y_label;
  bool log_y = false;
  std::vector<Series> series;   // non-finite y values (and y <= 0 on a log axis) are gaps
  std::vector<PlotMark> marks;  // drawn only when inside the data's x range
  int width = 560, height = 280;
};

// The gnuplot binary on PATH (or $FLATLINE_GNUPLOT); "" when there is none.
std::string gnuplot_binary();

// One "<svg ...>...</svg>" per spec ("" for a spec without data). Throws std::runtime_error with
// gnuplot's own message when gnuplot is missing or fails.
std::vector<std::string> gnuplot_svgs(const std::vector<PlotSpec>& specs);

}  // namespace flatline
