// The self-contained HTML report (report/html.h).
#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "confirm/confirm.h"
#include "scoring/score.h"

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

std::string confirmation_section(const ConfirmationData& c, const std::vector<std::string>& svgs);

std::string run_section(const RunData& run, const std::vector<PlotSpec>& specs, const std::vector<std::string>& svgs,
                        const std::string& id) {
  const Diagnosis& d = run.diagnosis;
  std::string s = fmt::format("<h2 id=\"{}\">{}</h2>\n<p>run directory: <code>{}</code></p>\n", id,
                              html_escape(run.name), html_escape(run.dir));
  if (run.manifest) {
    const Manifest& m = *run.manifest;
    std::string truth = "healthy (no fault)";
    if (!m.faults.empty()) {
      const FaultTruth& f = m.faults.front();
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
  for (size_t i = 0; i < specs.size(); ++i)
    s += svgs[i].empty() ? "<div class=\"plot\"><p>" + html_escape(specs[i].title) + ": not logged</p></div>\n"
                         : "<div class=\"plot\">" + svgs[i] + "</div>\n";
  s += "</div>\n";
  if (run.confirmation)
    s += confirmation_section(*run.confirmation, std::vector<std::string>(svgs.begin() + specs.size(), svgs.end()));
  return s;
}

// x = the step a record trained (a frozen logger repeats its logged step), y = its loss; a step
// trained twice (a restart) keeps its last record.
Series trained_loss(const std::vector<Record>& rs, int64_t samples_per_step, int64_t from, std::string name) {
  std::map<int64_t, double> by_step;
  for (const auto& r : rs) {
    if (r.kind != RecordKind::step || !(r.loss_avg || r.loss)) continue;
    const int64_t k = trained_step(r, samples_per_step);  // confirm's own reading of the replays
    if (k >= from) by_step[k] = r.loss_avg ? *r.loss_avg : *r.loss;
  }
  Series s;
  s.name = std::move(name);
  for (const auto& [k, v] : by_step) {
    s.x.push_back(static_cast<double>(k));
    s.y.push_back(v);
  }
  return s;
}

Series eval_of(const std::vector<Record>& rs, std::string name) {
  Series s;
  s.name = std::move(name);
  for (const auto& r : rs)
    if (r.kind == RecordKind::eval && r.eval_loss) {
      s.x.push_back(static_cast<double>(r.step));
      s.y.push_back(*r.eval_loss);
    }
  return s;
}

std::string fmt_stats(const SeriesStats& st) {
  return st.n == 0 ? "-" : fmt::format("{:.4f} &plusmn; {:.4f} ({} values, steps {}..{})", st.mean, st.se, st.n,
                                       st.first_step, st.last_step);
}

std::string confirmation_section(const ConfirmationData& c, const std::vector<std::string>& svgs) {
  const ConfirmResult& r = c.result;
  const bool ok = r.verdict == Verdict::confirmed;
  std::string s = fmt::format("<h3>confirmation by counterfactual: <span class=\"{}\">{}</span></h3>\n<p>{}</p>\n",
                              ok ? "ok" : "bad", to_string(r.verdict), html_escape(r.reason));
  if (r.verdict == Verdict::nothing_to_confirm) return s;
  const ConfirmPlan& p = r.plan;
  s += fmt::format("<p>repair: {}<br>replayed: control and repaired steps {}..{} from {}{}<br>control: {}</p>\n",
                   html_escape(r.repair), p.branch + 1, p.end,
                   p.branch == 0 ? std::string("step 0") : fmt::format("the checkpoint at step {}", p.branch),
                   p.needs_prefix() ? fmt::format(" (re-trained from {})", p.checkpoint < 0 ? std::string("step 0")
                                                                           : fmt::format("checkpoint step {}", p.checkpoint))
                                    : "",
                   html_escape(r.control.detail));
  const Comparison& cmp = r.comparison;
  s += fmt::format("<table><tr><th>{}: last {} values</th><th>mean &plusmn; s.e.</th></tr>\n"
                   "<tr><td>control (as the run was)</td><td>{}</td></tr>\n<tr><td>repaired</td><td>{}</td></tr>\n"
                   "<tr><td>difference (control &minus; repaired)</td><td>{:.4f}, s.e. {:.4f}{}; needed &gt; {:.4f}</td></tr>"
                   "</table>\n",
                   cmp.series == "loss" ? "training loss" : "held-out loss", p.compared, fmt_stats(cmp.control),
                   fmt_stats(cmp.repaired), cmp.difference, cmp.se, cmp.paired ? " (paired per step)" : "",
                   cmp.threshold);
  s += "<div class=\"plots\">\n";
  for (const auto& svg : svgs)
    if (!svg.empty()) s += "<div class=\"plot\">" + svg + "</div>\n";
  return s + "</div>\n";
}

std::string suite_section(const SuiteScore& s) {
  std::string out = fmt::format("<h2>scoreboard</h2>\n<p>accuracy {}/{} ({:.0f}%), false alarms {} on {} healthy "
                                "run(s), expectations not met: {}</p>\n<pre>{}</pre>\n",
                                s.correct, s.runs.size(), 100 * s.accuracy, s.false_alarms, s.healthy_runs,
                                s.expect_failures, html_escape(render_table(s)));
  const std::vector<std::string> causes = confusion_labels(s, /*every_checklist_cause=*/true);
  out += "<h2>confusion matrix</h2>\n<table><tr><th>truth \\ diagnosed</th>";
  for (const auto& c : causes) out += "<th>" + html_escape(c) + "</th>";  // a manifest's cause: input
  out += "</tr>\n";
  for (const auto& t : causes) {
    out += "<tr><th>" + html_escape(t) + "</th>";
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
    const FaultTruth& f = run.manifest->faults.front();
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

std::vector<PlotSpec> confirmation_plots(const RunData& run) {
  if (!run.confirmation || run.confirmation->result.verdict == Verdict::nothing_to_confirm) return {};
  const ConfirmationData& c = *run.confirmation;
  const ConfirmPlan& p = c.result.plan;
  std::vector<PlotMark> marks = {
      {static_cast<double>(p.branch) + 0.5, fmt::format("branch point (after step {})", p.branch), kOnset},
      {static_cast<double>(p.end - p.compared) + 0.5, fmt::format("compared: last {} steps", p.compared), kDetect}};
  std::vector<Record> as_was = c.prefix;
  as_was.insert(as_was.end(), c.control.begin(), c.control.end());
  // from a little before the branch point: the branches, not the whole descent, fill the plot
  const int64_t from = std::max<int64_t>(1, p.branch - std::max<int64_t>(20, p.plateau_steps() / 2));
  PlotSpec loss;
  loss.title = "confirmation: training loss of the replays (the control as the run was, and the repaired)";
  loss.x_label = "step trained";
  loss.y_label = "loss";
  loss.marks = marks;
  loss.width = 1120;
  loss.height = 320;
  // the run itself only where the control does not reproduce it (else it lies under the control's line)
  if (!c.result.control.faithful && !run.ranks.empty())
    loss.series.push_back(trained_loss(run.ranks[0], c.samples_per_step, from, "the run"));
  for (auto s : {trained_loss(as_was, c.samples_per_step, from, "control (as the run was)"),
                 trained_loss(c.repaired, c.samples_per_step, from, "repaired")})
    loss.series.push_back(std::move(s));
  std::vector<PlotSpec> out = {loss};
  if (p.held_out) {
    PlotSpec ev = loss;
    ev.title = "confirmation: held-out loss of the two branches";
    ev.y_label = "eval loss";
    ev.width = 560;
    ev.series.clear();
    ev.series = {eval_of(c.control, "control (as the run was)"), eval_of(c.repaired, "repaired")};
    out.push_back(ev);
  }
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
    auto all = specs;
    for (auto& c : confirmation_plots(runs[i])) all.push_back(std::move(c));
    page += run_section(runs[i], specs, gnuplot_svgs(all), fmt::format("run-{}", i));
  }
  return page + "</body></html>\n";
}

}  // namespace flatline
