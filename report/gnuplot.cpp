// Rendering PlotSpecs to inline SVG with one gnuplot process (report/gnuplot.h).
#include "report/gnuplot.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace flatline {
namespace {
namespace fs = std::filesystem;

// A gnuplot single-quoted string: '' is the only escape, and no command substitution (backquotes) or
// macro expansion happens inside one. A control character (a newline, a carriage return: a new
// command) is dropped: a title made from a run's name never ends the string's line.
std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
  }
  return out + "'";
}

bool has_data(const PlotSpec& p) {
  for (const auto& s : p.series)
    for (double y : s.y)
      if (std::isfinite(y) && (!p.log_y || y > 0)) return true;
  return false;
}

std::string script_for(const PlotSpec& p, const std::string& data, const std::string& out) {
  std::string s = fmt::format("reset\nset terminal svg size {},{} noenhanced font 'sans,11' background rgb 'white'\n",
                              p.width, p.height);
  s += "set output " + q(out) + "\n";
  s += "set title " + q(p.title) + "\nset xlabel " + q(p.x_label) + "\nset ylabel " + q(p.y_label) + "\n";
  s += "set grid lc rgb '#dddddd'\nset key below horizontal\nset tics nomirror\nset border 3\nset format y '%g'\n";
  if (p.log_y) s += "set logscale y\n";
  double x0 = INFINITY, x1 = -INFINITY;
  for (const auto& se : p.series)
    for (double x : se.x)
      if (std::isfinite(x)) x0 = std::min(x0, x), x1 = std::max(x1, x);
  int n = 0;
  for (const auto& m : p.marks) {
    if (!(m.x >= x0 && m.x <= x1)) continue;
    s += fmt::format("set arrow {} from {:.17g}, graph 0 to {:.17g}, graph 1 nohead lw 1.5 dt 2 lc rgb '{}' front\n",
                     ++n, m.x, m.x, m.color);
    s += fmt::format("set label {} {} at {:.17g}, graph {} left offset 0.3,0 tc rgb '{}' front\n", n, q(m.label),
                     m.x, 0.94 - 0.07 * (n - 1), m.color);
  }
  std::string plot = "plot ";
  for (size_t i = 0; i < p.series.size(); ++i)
    plot += fmt::format("{}{} index {} using 1:2 with lines lw 1.5 title {}", i ? ", " : "", q(data), i,
                        q(p.series[i].name));
  return s + plot + "\nunset output\n";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string gnuplot_binary() {
  if (const char* e = std::getenv("FLATLINE_GNUPLOT"); e && *e) return access(e, X_OK) == 0 ? e : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && access((d + "/gnuplot").c_str(), X_OK) == 0) return d + "/gnuplot";
  return "";
}

std::vector<std::string> gnuplot_svgs(const std::vector<PlotSpec>& specs) {
  std::vector<std::string> out(specs.size());
  const std::string bin = gnuplot_binary();
  if (bin.empty()) throw std::runtime_error("gnuplot not found on PATH (Debian: apt-get install gnuplot-nox)");
  std::string tmpl = (fs::temp_directory_path() / "flatline-plot-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary directory for gnuplot");
  const fs::path dir = tmpl;
  std::string script;
  for (size_t k = 0; k < specs.size(); ++k) {
    const PlotSpec& p = specs[k];
    if (!has_data(p)) continue;
    const std::string data = (dir / fmt::format("data-{}.txt", k)).string();
    std::ofstream f(data);
    for (const auto& s : p.series) {
      for (size_t i = 0; i < s.x.size(); ++i) {
        const bool ok = std::isfinite(s.y[i]) && (!p.log_y || s.y[i] > 0);
        f << fmt::format("{:.10g} ", s.x[i]) << (ok ? fmt::format("{:.10g}", s.y[i]) : "NaN") << "\n";
      }
      if (s.x.empty()) f << "NaN NaN\n";  // keeps the index numbering; gnuplot skips it
      f << "\n\n";
    }
    script += script_for(p, data, (dir / fmt::format("plot-{}.svg", k)).string());
  }
  std::ofstream((dir / "plots.gp").string()) << script;
  const std::string cmd = fmt::format("'{}' '{}' 2>&1", bin, (dir / "plots.gp").string());
  std::string msg;
  int status = -1;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, pipe)) msg.append(buf, n);
    status = pclose(pipe);
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::string svg = slurp((dir / fmt::format("plot-{}.svg", k)).string());
    const size_t at = svg.find("<svg");
    if (at != std::string::npos) out[k] = svg.substr(at);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (status != 0) throw std::runtime_error("gnuplot failed: " + msg);
  return out;
}

}  // namespace flatline
