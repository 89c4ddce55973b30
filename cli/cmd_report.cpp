// `flatline report RUN_OR_SUITE_DIR [--html FILE]`: a self-contained HTML report (inline SVG plots from
// gnuplot) for one run directory, or for a directory of run directories (`flatline score --out DIR`):
// scoreboard, confusion matrix and a section per run. Default output: DIR/report.html.
// Exit status: 0 when written, 2 when there is no run or gnuplot is missing or fails.
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "core/atomic_file.h"
#include "core/printable.h"
#include "report/html.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string dir, html;
};

int report(const Args& a) {
  try {
    std::vector<RunData> runs;
    const auto dirs = find_run_dirs(a.dir);
    const bool suite = dirs.size() > 1 || dirs.front() != a.dir;
    for (const auto& d : dirs) {
      runs.push_back(load_run(d));
      for (const auto& w : runs.back().warnings) std::cerr << "warning: " << printable(w) << "\n";
    }
    const std::string title = suite ? fmt::format("flatline report: suite {} ({} runs)", a.dir, runs.size())
                                    : fmt::format("flatline report: {}", runs.front().name);
    const std::string page = html_report(runs, title, suite);
    const std::string out = a.html.empty() ? a.dir + "/report.html" : a.html;
    write_file_atomic(out, page, "the report");  // whole or not at all: a full disk leaves no half page
    std::cout << fmt::format("wrote {} ({} run(s), {} plots)\n", out, runs.size(), runs.size() * kReportPlots);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "flatline report: " << printable(e.what()) << "\n";
    return 2;
  }
}

FLATLINE_COMMAND("report", "write a self-contained HTML report for a run or a suite directory", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("dir", a->dir, "a run directory, or a directory of run directories (flatline score --out)")
      ->required();
  sub.add_option("--html", a->html, "output file (default DIR/report.html)");
  return [a] { return report(*a); };
});

}  // namespace
}  // namespace flatline::cli
