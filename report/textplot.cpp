// ASCII plotter for the terminal drill (report/textplot.h).
#include "report/textplot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace flatline {

std::string text_plot(const std::vector<Series>& series, const TextPlotOptions& o) {
  static const char kMarks[] = "*o+x#@";
  const int w = std::max(2, o.width), h = std::max(2, o.height);
  auto ty = [&](double y) { return o.log_y ? std::log10(y) : y; };
  auto usable = [&](double y) { return std::isfinite(y) && (!o.log_y || y > 0); };
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      if (usable(s.y[i])) y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
    }
  std::string out = o.title.empty() ? "" : o.title + "\n";
  if (!std::isfinite(x0)) return out + "  (no data)\n";
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-300) {
    const double pad = std::max(std::fabs(y0) * 0.1, 0.5);
    y0 -= pad, y1 += pad;
  }
  if (x1 == x0) x1 = x0 + 1;
  std::vector<std::string> grid(h, std::string(w, ' '));
  for (size_t k = 0; k < series.size(); ++k) {
    const char mark = kMarks[k % 6];
    const auto& s = series[k];
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i])) continue;
      const int col = static_cast<int>(std::lround((s.x[i] - x0) / (x1 - x0) * (w - 1)));
      char m = mark;
      int row;
      if (usable(s.y[i])) {
        row = static_cast<int>(std::lround((y1 - ty(s.y[i])) / (y1 - y0) * (h - 1)));
      } else if (std::isnan(s.y[i])) {
        continue;
      } else {
        const bool top = std::isinf(s.y[i]) && s.y[i] > 0;
        row = top ? 0 : h - 1;
        m = top ? '^' : 'v';
      }
      grid[row][col] = m;
    }
  }
  auto label = [&](double v) { return fmt::format("{:.3g}", o.log_y ? std::pow(10.0, v) : v); };
  const std::string top = label(y1), bottom = label(y0), mid = label(0.5 * (y0 + y1));
  const size_t lw = std::max({top.size(), bottom.size(), mid.size()});
  for (int r = 0; r < h; ++r) {
    std::string l = r == 0 ? top : r == h - 1 ? bottom : r == h / 2 ? mid : "";
    out += fmt::format("{:>{}} |{}\n", l, lw, grid[r]);
  }
  out += std::string(lw + 1, ' ') + "+" + std::string(w, '-') + "\n";
  const std::string xl = fmt::format("{:.4g}", x0), xr = fmt::format("{:.4g}", x1);
  const int gap = std::max(1, w - static_cast<int>(xl.size() + xr.size()));
  out += std::string(lw + 2, ' ') + xl + std::string(gap, ' ') + xr;
  out += o.x_label.empty() ? "\n" : "  " + o.x_label + (o.log_y ? " (log y)" : "") + "\n";
  if (series.size() > 1) {
    std::string leg = std::string(lw + 2, ' ');
    for (size_t k = 0; k < series.size(); ++k) leg += fmt::format("{} {}   ", kMarks[k % 6], series[k].name);
    while (!leg.empty() && leg.back() == ' ') leg.pop_back();
    out += leg + "\n";
  }
  return out;
}

}  // namespace flatline
