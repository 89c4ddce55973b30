// The terminal plotter: exact character grids, axis labels, legend, inf/log-axis markers.
#include <gtest/gtest.h>

#include <cmath>

#include "report/textplot.h"

namespace flatline {
namespace {

TEST(TextPlot, DiagonalOnAFourByFourGrid) {
  Series s{"a", {0, 1, 2, 3}, {0, 1, 2, 3}};
  TextPlotOptions o;
  o.title = "t", o.x_label = "step", o.width = 4, o.height = 4;
  EXPECT_EQ(text_plot({s}, o),
            "t\n"
            "  3 |   *\n"
            "    |  * \n"
            "1.5 | *  \n"
            "  0 |*   \n"
            "    +----\n"
            "     0  3  step\n");
}

TEST(TextPlot, InfOnTopLogZeroAtBottomAndLegend) {
  Series a{"rank 0", {0, 1, 2}, {10, INFINITY, 1000}};
  Series b{"rank 1", {0, 1, 2}, {0, 100, 100}};
  TextPlotOptions o;
  o.width = 3, o.height = 3, o.log_y = true;
  EXPECT_EQ(text_plot({a, b}, o),
            "1e+03 | ^*\n"
            "  100 | oo\n"
            "   10 |v  \n"  // b's 0 at x=0 is drawn as 'v' on the bottom row, over a's 10 (later series win)
            "      +---\n"
            "       0 2\n"
            "       * rank 0   o rank 1\n");
}

TEST(TextPlot, ConstantAndEmpty) {
  TextPlotOptions o;
  o.width = 2, o.height = 3;
  EXPECT_EQ(text_plot({Series{"c", {5, 5}, {1, 1}}}, o), "1.5 |  \n  1 |* \n0.5 |  \n    +--\n     5 6\n");
  EXPECT_EQ(text_plot({Series{"e", {}, {}}}, o), "  (no data)\n");
}

}  // namespace
}  // namespace flatline
