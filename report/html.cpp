// The self-contained HTML report (report/html.h).
#include "report/html.h"

#include <fmt/format.h>

#include <cmath>

#include "detectors/score.h"

namespace flatline {
namespace {

constexpr const char* kOnset = "#d62728", *kDetect = "#1f77b4";

const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:22px}h2{font-size:18px;border-top:2px solid #ccc;padding-top:12px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f0f0f0}.fail{background:#fbe3e3}.pass{background:#e6f4e6}.cannot_run{background:#fff4d6}
.ok{color:#1a7f37;font-weight:bold}.bad{color:#c62828;font-weight:bold}pre{background:#f7f7f7;padding:8px;
font-size:12px;overflow-x:auto}.plots{display:flex;flex-wrap:wrap;gap:8px}.plot{border:1px solid #e4e4e4}
.zero{color:#bbb}.diag{background:#eef4fb})";

std::string with_rank(const std::string& cause, int rank) {
  return rank >= 0 && names_rank(cause) ? fmt::format("{} (rank {})", cause, rank) : cause;
}

std::string run_section(const RunData& run, const std::vector<PlotSpec>& specs, const std::vector<std::string>& svgs,
                        const std::string& id) {
  const Diagnosis& d = run.diagnosis;
  std::string s = fmt::format("<h2 id=\"{}\">{}</h2>\n<p>run directory: <code>{}</code></p>\n", id,
                              html_escape(run.name), html_escape(run.dir));
  if (run.manifest) {
    const Manifest& m = *run.manifest;
    std::string truth = "healthy (no fault)";
    if (!m.faults.empty()) {
      const ManifestFault& f = m.faults.front();
      truth = fmt::format("{}, fault {}/{}: active from step {}, in place at step {}", with_rank(f.cause_id(), f.rank),
                          f.kind, f.mode,
                          f.active_from, f.onset_step);
    }
    s += fmt::format("<p><b>truth</b> (manifest): {}; run {} after {:.1f} s, {} ranks, {} steps</p>\n",
                     html_escape(truth), html_escape(m.status), m.wall_s, m.world_size, m.steps);
    if (!m.error.empty()) s += "<p class=\"bad\">error: " + html_escape(m.error) + "</p>\n";
    const RunScore sc = score_run(m, d);
    s += fmt::format("<p>verdict: <span class=\"{}\">{}</span></p>\n", sc.correct ? "ok" : "bad",
                     sc.correct ? "correct" : (sc.false_alarm ? "false alarm" : "missed"));
  }
  s += fmt::format("<div class=\"diag\"><p><b>diagnosis: {}</b>", html_escape(with_rank(d.cause, d.rank)));
  if (!d.findings.empty())
    s += fmt::format(" &mdash; detected at step {} (t = {:.2f} s), onset estimated at step {}, confidence {:.2f}",
                     d.detected_step, d.detected_t, d.onset_step, d.confidence);
  s += "</p>\n<ul>\n";
  for (const auto& f : d.findings)
    for (const auto& e : f.evidence) s += "<li>[" + html_escape(f.cause) + "] " + html_escape(e) + "</li>\n";
  s += "</ul>\n<table><tr><th>#</th><th>check</th><th>result</th><th>detail</th></tr>\n";
  for (size_t i = 0; i < d.checklist.size(); ++i) {
    const auto& c = d.checklist[i];
    const char* st = to_string(c.state);
    s += fmt::format("<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", st, i + 1,
                     html_escape(c.cause), st, html_escape(c.detail));
  }
  s += "</table>\n<p>plateau: " + html_escape(d.plateau.detail.empty() ? "unknown" : d.plateau.detail) +
       "</p></div>\n<div class=\"plots\">\n";
  for (size_t i = 0; i < svgs.size(); ++i)
    s += svgs[i].empty() ? "<div class=\"plot\"><p>" + html_escape(specs[i].title) + ": not logged</p></div>\n"
                         : "<div class=\"plot\">" + svgs[i] + "</div>\n";
  return s + "</div>\n";
}

std::string suite_section(const SuiteScore& s) {
  std::string out = fmt::format("<h2>scoreboard</h2>\n<p>accuracy {}/{} ({:.0f}%), false alarms {} on {} healthy "
                                "run(s), expectations not met: {}</p>\n<pre>{}</pre>\n",
                                s.correct, s.runs.size(), 100 * s.accuracy, s.false_alarms, s.healthy_runs,
                                s.expect_failures, html_escape(render_table(s)));
  const std::vector<std::string> causes = confusion_labels(s, /*every_checklist_cause=*/true);
  out += "<h2>confusion matrix</h2>\n<table><tr><th>truth \\ diagnosed</th>";
  for (const auto& c : causes) out += "<th>" + c + "</th>";
  out += "</tr>\n";
  for (const auto& t : causes) {
    out += "<tr><th>" + t + "</th>";
    for (const auto& c : causes) {
      int n = 0;
      if (auto it = s.confusion.find(t); it != s.confusion.end())
        if (auto jt = it->second.find(c); jt != it->second.end()) n = jt->second;
      const char* cls = n == 0 ? "zero" : (t == c ? "pass" : "fail");
      out += fmt::format("<td class=\"{}\">{}</td>", cls, n);
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  return out;
}

std::vector<PlotSpec> report_plots(const RunData& run) {
  std::vector<PlotMark> steps, times;
  if (run.manifest && !run.manifest->faults.empty()) {
    const ManifestFault& f = run.manifest->faults.front();
    steps.push_back({static_cast<double>(f.onset_step), fmt::format("fault onset (step {})", f.onset_step), kOnset});
    if (std::isfinite(f.onset_t)) times.push_back({f.onset_t, fmt::format("fault onset ({:.1f} s)", f.onset_t), kOnset});
  }
  const Diagnosis& d = run.diagnosis;
  if (!d.findings.empty()) {
    steps.push_back({static_cast<double>(d.detected_step), fmt::format("detected (step {})", d.detected_step), kDetect});
    if (std::isfinite(d.detected_t))
      times.push_back({d.detected_t, fmt::format("detected ({:.1f} s)", d.detected_t), kDetect});
  }
  auto spec = [&](std::string title, std::string y, std::vector<Series> s, bool log_y = false) {
    PlotSpec p;
    p.title = std::move(title), p.x_label = "step", p.y_label = std::move(y), p.log_y = log_y, p.marks = steps;
    for (auto& x : s)
      if (!x.empty()) p.series.push_back(std::move(x));
    return p;
  };
  Series loss = step_series(run, "loss");
  loss.name = "train loss";
  std::vector<PlotSpec> out;
  out.push_back(spec("loss", "loss", {loss, eval_loss(run)}));
  out.push_back(spec("learning rate", "lr", {step_series(run, "lr")}));
  out.push_back(spec("grad norm (global, before clipping)", "grad norm", {step_series(run, "grad_norm")}, true));
  out.push_back(spec("loss scale", "loss scale", {step_series(run, "loss_scale")}, true));
  out.push_back(spec("local grad norm per rank (before all-reduce)", "grad norm", local_grad_norms(run)));
  PlotSpec rate = spec("step rate", "logged steps/s", {step_rate(run)});
  rate.x_label = "wall time (s)";
  rate.marks = times;
  out.push_back(std::move(rate));
  return out;
}

std::string html_report(const std::vector<RunData>& runs, const std::string& title, bool suite) {
  suite = suite || runs.size() > 1;
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                     html_escape(title) + "</title>\n<style>" + kStyle + "</style></head><body>\n<h1>" +
                     html_escape(title) + "</h1>\n";
  page += fmt::format("<p>Dashed lines: <span style=\"color:{}\">fault onset</span> (manifest) and "
                      "<span style=\"color:{}\">detection</span> (diagnosis).</p>\n", kOnset, kDetect);
  if (suite) {
    std::vector<RunScore> scores;
    for (const auto& r : runs)
      if (r.manifest) scores.push_back(score_run(*r.manifest, r.diagnosis));
    page += suite_section(score_suite(scores)) + "<h2>runs</h2>\n<ul>\n";
    for (size_t i = 0; i < runs.size(); ++i)
      page += fmt::format("<li><a href=\"#run-{}\">{}</a>: {}</li>\n", i, html_escape(runs[i].name),
                          html_escape(with_rank(runs[i].diagnosis.cause, runs[i].diagnosis.rank)));
    page += "</ul>\n";
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto specs = report_plots(runs[i]);
    page += run_section(runs[i], specs, gnuplot_svgs(specs), fmt::format("run-{}", i));
  }
  return page + "</body></html>\n";
}

}  // namespace flatline
