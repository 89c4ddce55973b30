// Scoring a diagnosis against a run's manifest, and a suite of runs (docs/DESIGN.md §6): the
// per-run verdict, suite aggregates, and three renderings (terminal table, JSON, JUnit).
#include "scoring/score.h"

#include "core/printable.h"
#include "core/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace flatline {
namespace {

constexpr const char* kHealthy = "healthy";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Rows/columns of the confusion matrix: the cause table's order (checklist, fleet findings, healthy).
const std::vector<std::string>& known_causes() { return cause_ids(); }

// The rank only matters for a cause that names one, and only when the truth names a rank.
bool rank_applies(const std::string& cause, int truth_rank) { return names_rank(cause) && truth_rank >= 0; }

std::string with_rank(const std::string& cause, int rank) { return cause_with_rank(cause, rank, " rank "); }

std::string expectation(const Manifest& m) {
  std::string who = with_rank(m.expect_cause, m.expect_rank);
  if (is_healthy(m.expect_cause)) return "expected healthy";
  return fmt::format("expected {} within {} steps", who, m.expect_within_steps);
}

// p95 by the nearest-rank method: the smallest value with at least 95% of the sample at or below it,
// i.e. sorted[ceil(0.95 * n) - 1]. Always one of the observed latencies (no interpolation), so with
// few runs p95 is simply the worst run.
double p95_nearest_rank(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(v.size())));
  return v[std::max<size_t>(rank, 1) - 1];
}

std::string verdict(const RunScore& r) {
  if (r.harness_error) return "ERROR";
  if (r.correct) return "ok";
  if (r.false_alarm) return "FALSE ALARM";
  return "MISS";
}

std::string num_or_dash(double v, const char* fmt_spec) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(fmt_spec), v) : "-";
}

nlohmann::json num_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

// Escapes text for XML 1.0. In attributes (attr = true) line breaks and tabs are written as character
// references so that parsers do not normalise them to spaces.
std::string xml_escape(const std::string& s, bool attr) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += attr ? "&#10;" : "\n"; break;
      case '\r': out += "&#13;"; break;
      case '\t': out += attr ? "&#9;" : "\t"; break;
      default:
        // Other control characters are not allowed in XML 1.0, even escaped.
        if (c < 0x20) out += '?';
        else out += static_cast<char>(c);
    }
  }
  return out;
}

bool names_true_cause(const Diagnosis& d, const std::string& truth_cause, int truth_rank) {
  return d.cause == truth_cause && (!rank_applies(truth_cause, truth_rank) || d.rank == truth_rank);
}

RunScore score_run(const Manifest& m, const Diagnosis& d) {
  RunScore r;
  r.scenario = m.scenario;
  r.diagnosis = d;
  r.run_status = m.status;
  r.wall_s = m.wall_s;
  double onset_t = kNaN;
  if (!m.faults.empty()) {
    const FaultTruth& f = m.faults.front();
    r.truth_cause = f.cause_id();
    r.truth_rank = f.rank;
    r.active_from = f.active_from;
    r.onset_step = f.onset_step;
    onset_t = f.onset_t;
  }
  const bool truth_healthy = is_healthy(r.truth_cause);
  const bool diag_healthy = is_healthy(d.cause);

  // --- a harness error: the run itself did not do what the scenario asked ---
  if ((m.status == "failed" && !m.failure_expected()) || m.status == "interrupted" || m.status == "running") {
    r.harness_error = true;
    r.expect_detail = fmt::format("harness error: run {} ({}): {}", m.status == "running" ? "never finished" : m.status,
                                  expectation(m), m.error.empty() ? "no error recorded" : m.error);
    return r;
  }

  // --- the verdict ---
  if (truth_healthy) {
    r.correct = diag_healthy;
    r.false_alarm = !diag_healthy;
  } else if (!diag_healthy) {
    const bool early = r.active_from >= 0 && d.detected_step < r.active_from;
    r.false_alarm = early;
    r.correct = !early && names_true_cause(d, r.truth_cause, r.truth_rank);
    // Latency of any detection on a faulty run (also of a wrong or early one: it is shown per run, but
    // only correct runs enter the suite's latency statistics).
    if (r.onset_step >= 0 && d.detected_step >= 0) {
      r.latency_steps = d.detected_step - r.onset_step;
      if (std::isfinite(onset_t) && std::isfinite(d.detected_t)) r.latency_s = d.detected_t - onset_t;
    }
  }

  // --- the scenario's expectation ---
  const std::string got = diag_healthy ? std::string(kHealthy)
                                       : fmt::format("{} at step {}", with_rank(d.cause, d.rank), d.detected_step);
  if (r.false_alarm) {
    r.expect_met = false;
    r.expect_detail = truth_healthy ? fmt::format("false alarm: {} on a healthy run", got)
                                    : fmt::format("false alarm: {} before active_from {}", got, r.active_from);
  } else if (!r.correct) {
    // Name the truth only where the scenario's expectation does not already say it.
    std::string truth = truth_healthy || r.truth_cause == m.expect_cause
                            ? ""
                            : fmt::format(" (injected: {})", with_rank(r.truth_cause, r.truth_rank));
    r.expect_met = false;
    r.expect_detail = fmt::format("{}, got {}{}", expectation(m), got, truth);
  } else if (d.cause != (is_healthy(m.expect_cause) ? kHealthy : m.expect_cause) ||
             (m.expect_rank >= 0 && !diag_healthy && d.rank != m.expect_rank)) {
    // Correct against the manifest's fault, but the scenario expected something else: the scenario
    // and its fault disagree; report it rather than hide it.
    r.expect_met = false;
    r.expect_detail = fmt::format("{}, got {} ({})", expectation(m), got,
                                  truth_healthy ? "the manifest records no fault" : "which matches the injected fault");
  } else if (!truth_healthy && r.latency_steps && *r.latency_steps > m.expect_within_steps) {
    r.expect_met = false;
    r.expect_detail = fmt::format("{}, latency {} > {}", expectation(m), *r.latency_steps, m.expect_within_steps);
  } else if (!truth_healthy && !r.latency_steps) {
    r.expect_met = false;
    r.expect_detail = fmt::format("{}, latency unknown (onset_step {}, detected_step {})", expectation(m),
                                  r.onset_step, d.detected_step);
  } else {
    r.expect_met = true;
  }
  return r;
}

SuiteScore score_suite(std::vector<RunScore> runs) {
  SuiteScore s;
  s.runs = std::move(runs);
  int healthy_false_alarms = 0;
  std::map<std::string, std::vector<double>> lat_steps, lat_s;
  for (const auto& r : s.runs) {
    if (r.harness_error) {
      ++s.harness_errors;
      ++s.expect_failures;
      continue;
    }
    const bool truth_healthy = is_healthy(r.truth_cause);
    const std::string diag = is_healthy(r.diagnosis.cause) ? kHealthy : r.diagnosis.cause;
    if (r.correct) ++s.correct;
    if (truth_healthy) ++s.healthy_runs;
    if (r.false_alarm) {
      ++s.false_alarms;
      if (truth_healthy) ++healthy_false_alarms;
    }
    if (!r.expect_met) ++s.expect_failures;
    ++s.confusion[truth_healthy ? kHealthy : r.truth_cause][diag];
    if (truth_healthy) continue;
    auto& steps = lat_steps[r.truth_cause];  // every true cause gets an entry, even with no correct run
    auto& secs = lat_s[r.truth_cause];
    if (r.correct && r.latency_steps) steps.push_back(static_cast<double>(*r.latency_steps));
    if (r.correct && r.latency_s) secs.push_back(*r.latency_s);
  }
  const size_t scored = s.runs.size() - static_cast<size_t>(s.harness_errors);
  s.accuracy = scored == 0 ? 0.0 : static_cast<double>(s.correct) / static_cast<double>(scored);
  // Per healthy run: alarms raised on clean runs only. Early alarms on faulty runs are in false_alarms
  // (and in each run's verdict) but have no healthy run to be divided by.
  s.false_alarms_per_healthy_run =
      s.healthy_runs ? static_cast<double>(healthy_false_alarms) / static_cast<double>(s.healthy_runs) : 0.0;
  for (const auto& [cause, steps] : lat_steps) {
    CauseLatency& l = s.latency[cause];
    l.n = static_cast<int>(steps.size());
    l.median_steps = median(steps);
    l.p95_steps = p95_nearest_rank(steps);
    l.median_s = median(lat_s[cause]);
    l.p95_s = p95_nearest_rank(lat_s[cause]);
  }
  return s;
}

std::vector<std::string> confusion_labels(const SuiteScore& s, bool every_checklist_cause) {
  auto occurs = [&](const std::string& c) {
    if (s.confusion.count(c)) return true;
    for (const auto& [t, row] : s.confusion)
      if (row.count(c)) return true;
    return false;
  };
  std::vector<std::string> out;
  for (const Cause& c : cause_table())
    if (occurs(c.id) || (every_checklist_cause && c.kind != CauseKind::fleet)) out.push_back(c.id);
  auto add_unknown = [&](const std::string& c) {
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  for (const auto& [t, row] : s.confusion) {
    add_unknown(t);
    for (const auto& [d, k] : row) add_unknown(d);
  }
  return out;
}

namespace {
std::string render_table_unescaped(const SuiteScore& s) {
  std::string out;
  auto w = std::back_inserter(out);

  // --- one row per run ---
  size_t wn = 8, wt = 5, wd = 9;
  std::vector<std::string> truths, diags;
  for (const auto& r : s.runs) {
    truths.push_back(with_rank(r.truth_cause, r.truth_rank));
    diags.push_back(with_rank(is_healthy(r.diagnosis.cause) ? kHealthy : r.diagnosis.cause, r.diagnosis.rank));
    wn = std::max(wn, r.scenario.size());
    wt = std::max(wt, truths.back().size());
    wd = std::max(wd, diags.back().size());
  }
  fmt::format_to(w, "{:<{}}  {:<{}}  {:<{}}  {:<11}  {:>9}  {:>9}  {}\n", "scenario", wn, "truth", wt, "diagnosis", wd,
                 "result", "lat steps", "lat s", "expect");
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const RunScore& r = s.runs[i];
    std::string ls = r.latency_steps ? std::to_string(*r.latency_steps) : "-";
    std::string lsec = r.latency_s ? fmt::format("{:.2f}", *r.latency_s) : "-";
    fmt::format_to(w, "{:<{}}  {:<{}}  {:<{}}  {:<11}  {:>9}  {:>9}  {}\n", r.scenario, wn, truths[i], wt, diags[i],
                   wd, verdict(r), ls, lsec, r.expect_met ? "met" : "MISSED");
  }
  bool any_missed = false;
  for (const auto& r : s.runs) {
    if (r.expect_met) continue;
    if (!any_missed) out += "\nexpectations missed:\n";
    any_missed = true;
    fmt::format_to(w, "  {}: {}\n", r.scenario, r.expect_detail);
  }

  // --- aggregates ---
  const size_t n = s.runs.size();
  fmt::format_to(w, "\naccuracy: {}/{} ({:.1f}%)", s.correct, n - static_cast<size_t>(s.harness_errors),
                 100.0 * s.accuracy);
  if (s.harness_errors)
    fmt::format_to(w, "; {} run(s) in harness error, not scored (the run failed, not the detectors)", s.harness_errors);
  out += '\n';
  int early = 0;
  for (const auto& r : s.runs)
    if (r.false_alarm && !is_healthy(r.truth_cause)) ++early;
  fmt::format_to(w, "false alarms per healthy run: {:.2f} ({} on {} healthy runs; {} before active_from on faulty runs)\n",
                 s.false_alarms_per_healthy_run, s.false_alarms - early, s.healthy_runs, early);
  fmt::format_to(w, "expectations missed: {}/{}\n", s.expect_failures, n);
  if (!s.latency.empty()) {
    out += "latency of correct detections (detected - onset; p95 nearest-rank):\n";
    size_t wc = 5;
    for (const auto& [cause, l] : s.latency) wc = std::max(wc, cause.size());
    for (const auto& c : known_causes()) {
      auto it = s.latency.find(c);
      if (it == s.latency.end()) continue;
      const CauseLatency& l = it->second;
      fmt::format_to(w, "  {:<{}}  n={:<3}  median {:>7} steps {:>8} s   p95 {:>7} steps {:>8} s\n", c, wc, l.n,
                     num_or_dash(l.median_steps, "{:.1f}"), num_or_dash(l.median_s, "{:.2f}"),
                     num_or_dash(l.p95_steps, "{:.0f}"), num_or_dash(l.p95_s, "{:.2f}"));
    }
    for (const auto& [c, l] : s.latency) {  // causes outside the checklist (a misspelled manifest kind)
      if (std::find(known_causes().begin(), known_causes().end(), c) != known_causes().end()) continue;
      fmt::format_to(w, "  {:<{}}  n={:<3}  median {:>7} steps {:>8} s   p95 {:>7} steps {:>8} s\n", c, wc, l.n,
                     num_or_dash(l.median_steps, "{:.1f}"), num_or_dash(l.median_s, "{:.2f}"),
                     num_or_dash(l.p95_steps, "{:.0f}"), num_or_dash(l.p95_s, "{:.2f}"));
    }
  }

  // --- confusion matrix: the causes that occur, in the cause table's order, then any others ---
  const std::vector<std::string> causes = confusion_labels(s, /*every_checklist_cause=*/false);
  if (causes.empty()) return out;
  size_t wl = 5, wcol = 3;
  for (const auto& c : causes) wl = std::max(wl, c.size() + 4);
  // Columns are numbered like the rows, so the matrix stays narrow: "[2] lr_zero" is column 2.
  for (size_t i = 0; i < causes.size(); ++i) wcol = std::max(wcol, fmt::format("[{}]", i + 1).size());
  out += "confusion (rows: truth, columns: diagnosis):\n";
  fmt::format_to(w, "  {:<{}}", "", wl);
  for (size_t i = 0; i < causes.size(); ++i) fmt::format_to(w, " {:>{}}", fmt::format("[{}]", i + 1), wcol);
  out += '\n';
  for (size_t i = 0; i < causes.size(); ++i) {
    fmt::format_to(w, "  {:<{}}", fmt::format("[{}] {}", i + 1, causes[i]), wl);
    auto row = s.confusion.find(causes[i]);
    for (const auto& d : causes) {
      int k = 0;
      if (row != s.confusion.end()) {
        auto it = row->second.find(d);
        if (it != row->second.end()) k = it->second;
      }
      fmt::format_to(w, " {:>{}}", k ? std::to_string(k) : ".", wcol);
    }
    out += '\n';
  }
  return out;
}
}  // namespace

// What reaches a terminal: control characters from the input made printable (core/printable.h).
std::string render_table(const SuiteScore& s) { return printable(render_table_unescaped(s)); }

std::string to_json(const SuiteScore& s) {
  using nlohmann::json;
  json j;
  j["runs"] = json::array();
  for (const auto& r : s.runs) {
    const Diagnosis& d = r.diagnosis;
    json jr = {
        {"scenario", r.scenario},
        {"truth", {{"cause", r.truth_cause}, {"rank", r.truth_rank}, {"active_from", r.active_from},
                   {"onset_step", r.onset_step}}},
        {"diagnosis", {{"cause", d.cause}, {"rank", d.rank}, {"onset_step", d.onset_step},
                       {"detected_step", d.detected_step}, {"detected_t", num_or_null(d.detected_t)},
                       {"confidence", num_or_null(d.confidence)}, {"evidence", d.evidence}}},
        {"result", verdict(r)},
        {"correct", r.correct},
        {"false_alarm", r.false_alarm},
        {"harness_error", r.harness_error},
        {"latency_steps", r.latency_steps ? json(*r.latency_steps) : json(nullptr)},
        {"latency_s", r.latency_s ? num_or_null(*r.latency_s) : json(nullptr)},
        {"expect_met", r.expect_met},
        {"expect_detail", r.expect_detail},
        {"status", r.run_status},
        {"wall_s", num_or_null(r.wall_s)},
    };
    j["runs"].push_back(std::move(jr));
  }
  j["summary"] = {{"runs", s.runs.size()},
                  {"correct", s.correct},
                  {"accuracy", s.accuracy},
                  {"healthy_runs", s.healthy_runs},
                  {"false_alarms", s.false_alarms},
                  {"false_alarms_per_healthy_run", s.false_alarms_per_healthy_run},
                  {"expect_failures", s.expect_failures},
                  {"harness_errors", s.harness_errors}};
  j["confusion"] = json::object();
  for (const auto& [t, row] : s.confusion)
    for (const auto& [d, k] : row) j["confusion"][t][d] = k;
  j["latency"] = json::object();
  for (const auto& [c, l] : s.latency)
    j["latency"][c] = {{"n", l.n},
                       {"median_steps", num_or_null(l.median_steps)},
                       {"p95_steps", num_or_null(l.p95_steps)},
                       {"median_s", num_or_null(l.median_s)},
                       {"p95_s", num_or_null(l.p95_s)}};
  return j.dump(2);
}

std::string to_junit(const SuiteScore& s) {
  double total = 0;
  for (const auto& r : s.runs)
    if (std::isfinite(r.wall_s)) total += r.wall_s;
  auto secs = [](double v) { return fmt::format("{:.3f}", std::isfinite(v) ? v : 0.0); };
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  auto w = std::back_inserter(out);
  // JUnit: a failure is the detectors' (an expectation missed), an error the harness's (the run failed).
  const int failures = s.expect_failures - s.harness_errors;
  fmt::format_to(w, "<testsuites name=\"flatline\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">\n",
                 s.runs.size(), failures, s.harness_errors, secs(total));
  fmt::format_to(w, "  <testsuite name=\"flatline.score\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{}\">\n",
                 s.runs.size(), failures, s.harness_errors, secs(total));
  for (const auto& r : s.runs) {
    const std::string cls = "flatline." + (is_healthy(r.truth_cause) ? std::string(kHealthy) : r.truth_cause);
    fmt::format_to(w, "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"", xml_escape(cls), xml_escape(r.scenario),
                   secs(r.wall_s));
    if (r.expect_met) {
      out += "/>\n";
      continue;
    }
    out += ">\n";
    const Diagnosis& d = r.diagnosis;
    std::string body = fmt::format("truth: {}\ndiagnosis: {} (detected at step {}, confidence {:.2f})\nstatus: {}",
                                   with_rank(r.truth_cause, r.truth_rank), with_rank(d.cause, d.rank),
                                   d.detected_step, d.confidence, r.run_status);
    for (const auto& e : d.evidence) body += "\n  " + e;
    if (r.harness_error)
      fmt::format_to(w, "      <error message=\"{}\" type=\"harness\">{}</error>\n", xml_escape(r.expect_detail),
                     xml_escape(body, /*attr=*/false));
    else
      fmt::format_to(w, "      <failure message=\"{}\" type=\"{}\">{}</failure>\n", xml_escape(r.expect_detail),
                     r.false_alarm ? "false_alarm" : "expect", xml_escape(body, /*attr=*/false));
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace flatline
