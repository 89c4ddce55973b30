// Text plots for the terminal drill: series drawn as marker characters on a fixed character grid,
// with the y range on the left and the x range underneath. Plain ASCII, so that any terminal (and
// tmux capture-pane) shows it the same way. Non-finite values (inf from an fp16 overflow) are drawn
// as '^' on the top row; on a log axis values <= 0 are drawn as 'v' on the bottom row.
#pragma once
#include <string>
#include <vector>

#include "report/signals.h"

namespace flatline {

struct TextPlotOptions {
  std::string title, x_label;
  int width = 64, height = 12;   // plot area in characters
  bool log_y = false;
};

// Markers per series in order: * o + x # @. A legend line follows when there is more than one series.
std::string text_plot(const std::vector<Series>& series, const TextPlotOptions& o);

}  // namespace flatline
