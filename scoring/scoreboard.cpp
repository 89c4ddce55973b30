// Several detectors side by side (scoring/scoreboard.h): per-run scores of the built-in suite and of
// external detectors, their aggregates, and the three renderings.
#include "scoring/scoreboard.h"

#include "core/printable.h"

#include "run/causes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace flatline {
namespace {

bool healthy_truth(const Manifest& m) { return m.faults.empty() || is_healthy(m.faults.front().cause_id()); }

// The detection-level verdict from the first alarm's stamp.
void detection(DetectorRunScore& r, const Manifest& m, int64_t step, double t) {
  if (healthy_truth(m)) {
    r.detected = !r.alarmed;
    return;
  }
  const FaultTruth& f = m.faults.front();
  if (!r.alarmed) return;
  r.early = f.active_from >= 0 && step < f.active_from;
  r.detected = !r.early;
  if (f.onset_step >= 0 && step >= 0) {
    r.detect_latency_steps = step - f.onset_step;
    if (std::isfinite(f.onset_t) && std::isfinite(t)) r.detect_latency_s = t - f.onset_t;
  }
}

// The expectation of a run whose first alarm names no cause: judged on detection alone.
void detection_expectation(DetectorRunScore& r, const Manifest& m, int64_t step) {
  const std::string got = fmt::format("alarm (no cause) at step {}", step);
  if (r.cause.harness_error) {  // the run failed other than by its fault: score_run's rule (score.h)
    r.expect_detail = r.cause.expect_detail;
  } else if (healthy_truth(m)) {
    r.expect_detail = fmt::format("false alarm: {} on a healthy run", got);
  } else if (r.early) {
    r.expect_detail = fmt::format("false alarm: {} before active_from {}", got, m.faults.front().active_from);
  } else if (!r.detect_latency_steps) {
    r.expect_detail = fmt::format("expected {} within {} steps (detection only), got {}, latency unknown",
                                  m.expect_cause, m.expect_within_steps, got);
  } else if (*r.detect_latency_steps > m.expect_within_steps) {
    r.expect_detail = fmt::format("expected {} within {} steps (detection only), got {}: latency {} > {}",
                                  m.expect_cause, m.expect_within_steps, got, *r.detect_latency_steps,
                                  m.expect_within_steps);
  } else {
    r.expect_met = true;
  }
}

// A run that failed other than by its fault (score.h): no detector is judged on it.
void harness_verdict(DetectorRunScore& r) {
  if (!r.cause.harness_error) return;
  r.detected = r.early = false;
  r.detect_latency_steps.reset();
  r.detect_latency_s.reset();
  r.expect_met = false;
  r.expect_detail = r.cause.expect_detail;
}

// One word per run and detector, used by the table, the JSON and JUnit.
std::string result(const DetectorRunScore& r, const Manifest& m) {
  if (r.cause.harness_error) return "ERROR";
  if (!r.error.empty()) return "DETECTOR ERROR";
  if (healthy_truth(m)) return r.alarmed ? "FALSE ALARM" : "ok";
  if (!r.alarmed) return "MISS";
  if (r.early) return "EARLY";
  if (r.cause.correct) return "ok";
  return r.named ? "WRONG" : "detected";
}

std::string first_said(const DetectorRunScore& r) {
  if (!r.error.empty()) return "error";
  if (!r.alarmed) return "-";
  const Diagnosis& d = r.cause.diagnosis;
  return cause_with_rank(d.cause, d.rank, " rank ");
}

std::string pct(int k, int n) { return n ? fmt::format("{}/{} ({:.1f}%)", k, n, 100.0 * k / n) : "-"; }

std::string num(double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }

std::string xml(const std::string& s) { return xml_escape(s); }

nlohmann::json opt_json(const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
nlohmann::json opt_json(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

DetectorRunScore score_builtin_run(const Manifest& m, const Diagnosis& d) {
  DetectorRunScore r;
  r.detector = kBuiltinDetector;
  r.cause = score_run(m, d);
  r.alarmed = !is_healthy(d.cause);
  r.named = r.alarmed;
  detection(r, m, d.detected_step, d.detected_t);
  r.expect_met = r.cause.expect_met;
  r.expect_detail = r.cause.expect_detail;
  harness_verdict(r);
  return r;
}

DetectorRunScore score_external_run(const Manifest& m, const ExternalOutcome& o) {
  DetectorRunScore r;
  r.detector = o.name;
  r.alarms = o.alarms;
  r.stderr_tail = o.stderr_tail;
  if (!o.error.empty()) {
    r.error = o.error;
    r.cause = score_run(m, Diagnosis{});
    r.cause.diagnosis.cause = "error";
    r.cause.correct = r.cause.false_alarm = false;
    r.cause.latency_steps.reset();
    r.cause.latency_s.reset();
    r.cause.expect_met = false;
    r.cause.expect_detail = "detector error: " + o.error;
    r.expect_detail = r.cause.expect_detail;
    return r;
  }
  Diagnosis d;
  int64_t step = -1;
  double t = NAN;
  if (!o.alarms.empty()) {
    const ExternalAlarm& a = o.alarms.front();
    d.cause = a.cause.empty() ? kUnnamedAlarm : a.cause;
    d.rank = a.rank;
    d.detected_step = step = a.step;
    d.detected_t = t = a.t;
    d.confidence = a.confidence.value_or(0);
    d.evidence = a.evidence;
    r.alarmed = true;
    r.named = !a.cause.empty();
  }
  r.cause = score_run(m, d);
  detection(r, m, step, t);
  if (!r.alarmed || r.named) {
    r.expect_met = r.cause.expect_met;
    r.expect_detail = r.cause.expect_detail;
  } else {
    detection_expectation(r, m, step);
  }
  harness_verdict(r);
  return r;
}

Scoreboard make_scoreboard(std::vector<Manifest> manifests, std::vector<std::vector<DetectorRunScore>> runs,
                           std::vector<std::optional<RunConfirmation>> confirmations) {
  Scoreboard b;
  b.manifests = std::move(manifests);
  b.runs = std::move(runs);
  b.confirmations = std::move(confirmations);
  for (size_t i = 0; i < b.confirmations.size() && i < b.runs.size(); ++i) {
    auto& c = b.confirmations[i];
    if (!c) continue;
    const RunScore& r = b.runs[i].front().cause;  // the built-in suite's
    const bool true_cause = names_true_cause(r.diagnosis, r.truth_cause, r.truth_rank);
    c->right = c->verdict == "nothing to confirm" ? true
               : c->verdict == "confirmed"        ? true_cause
               : c->verdict == "not confirmed"    ? !true_cause
                                                  : false;
    ++b.confirmations_judged;
    b.confirmations_right += c->right;
  }
  const size_t nd = b.runs.empty() ? 0 : b.runs.front().size();
  for (size_t j = 0; j < nd; ++j) {
    DetectorSummary s;
    s.detector = b.runs.front()[j].detector;
    b.detectors.push_back(s.detector);
    std::vector<RunScore> cause, detect;
    for (size_t i = 0; i < b.runs.size(); ++i) {
      const DetectorRunScore& r = b.runs[i][j];
      const Manifest& m = b.manifests[i];
      cause.push_back(r.cause);
      // Detection level through the same aggregation: "correct" = detected, latency = the first alarm's.
      RunScore dr = r.cause;
      dr.correct = r.detected;
      dr.latency_steps = r.detect_latency_steps;
      dr.latency_s = r.detect_latency_s;
      detect.push_back(dr);
      ++s.runs;
      if (r.cause.harness_error) {  // the run failed, not the detector: in no rate
        ++s.harness_errors;
        ++s.expect_failures;
        continue;
      }
      s.detected += r.detected;
      s.early += r.early;
      s.errors += !r.error.empty();
      s.expect_failures += !r.expect_met;
      s.names_causes |= r.named;
      if (healthy_truth(m)) {
        ++s.healthy_runs;
        if (r.alarmed && r.error.empty()) {
          ++s.healthy_alarms;
          s.alarmed_healthy.push_back(fmt::format("{}: {} at step {}", m.scenario, first_said(r),
                                                  r.cause.diagnosis.detected_step));
        }
      } else {
        ++s.faulty_runs;
        s.faults_detected += r.detected;
      }
    }
    s.suite = score_suite(std::move(cause));
    s.detect_latency = score_suite(std::move(detect)).latency;
    b.summaries.push_back(std::move(s));
  }
  return b;
}

namespace {
std::string render_scoreboard_unescaped(const Scoreboard& b) {
  std::string out;
  auto w = std::back_inserter(out);
  if (!b.summaries.empty()) out += render_table(b.summaries.front().suite);
  if (b.confirmations_judged > 0) {  // --- the "confirmed" column of the built-in's diagnoses ---
    out += "\n== confirmed: each diagnosis replayed with its cause repaired (flatline confirm) ==\n";
    size_t wn = 8, wd = 9;
    std::vector<std::string> diags;
    for (size_t i = 0; i < b.runs.size(); ++i) {
      const Diagnosis& d = b.runs[i].front().cause.diagnosis;
      diags.push_back(cause_with_rank(d.cause, d.rank, " rank "));
      wn = std::max(wn, b.manifests[i].scenario.size());
      wd = std::max(wd, diags.back().size());
    }
    fmt::format_to(w, "{:<{}}  {:<{}}  {:<18}  {:>8}  {:>8}  {:>6}  {:>6}  {}\n", "scenario", wn, "diagnosis", wd,
                   "confirmed", "margin", "needed", "steps", "wall s", "result");
    double wall = 0;
    int64_t steps = 0;
    for (size_t i = 0; i < b.runs.size() && i < b.confirmations.size(); ++i) {
      const auto& c = b.confirmations[i];
      if (!c) continue;
      const bool shown = c->verdict != "nothing to confirm";
      fmt::format_to(w, "{:<{}}  {:<{}}  {:<18}  {:>8}  {:>8}  {:>6}  {:>6}  {}\n", b.manifests[i].scenario, wn, diags[i],
                     wd, shown ? c->verdict : "-", num(c->margin, "{:.4f}"), num(c->needed, "{:.4f}"),
                     shown ? std::to_string(c->steps_trained) : "", shown ? fmt::format("{:.1f}", c->wall_s) : "",
                     c->right ? "right" : "WRONG");
      wall += c->wall_s;
      steps += c->steps_trained;
    }
    fmt::format_to(w, "confirmations right: {}/{} ({} replayed steps, {:.1f} s)\n", b.confirmations_right,
                   b.confirmations_judged, steps, wall);
    for (size_t i = 0; i < b.confirmations.size(); ++i)
      if (b.confirmations[i] && !b.confirmations[i]->right)
        fmt::format_to(w, "  {}: {}\n", b.manifests[i].scenario, b.confirmations[i]->reason);
  }
  if (b.summaries.size() > 1) {
    for (size_t j = 1; j < b.summaries.size(); ++j) {
      fmt::format_to(w, "\n== detector {} ==\n", b.detectors[j]);
      out += render_table(b.summaries[j].suite);
    }
    // --- side by side: one row per run, one column per detector ---
    out += "\n== side by side (first alarm: what it said, latency in steps, result) ==\n";
    size_t wn = 8, wt = 5;
    std::vector<std::vector<std::string>> cells(b.runs.size());
    std::vector<size_t> wc;
    for (const auto& d : b.detectors) wc.push_back(d.size());
    for (size_t i = 0; i < b.runs.size(); ++i) {
      const Manifest& m = b.manifests[i];
      wn = std::max(wn, m.scenario.size());
      wt = std::max(wt, b.runs[i].front().cause.truth_cause.size());
      for (size_t j = 0; j < b.runs[i].size(); ++j) {
        const DetectorRunScore& r = b.runs[i][j];
        std::string c = first_said(r);
        if (r.alarmed && r.error.empty())
          c += r.detect_latency_steps ? fmt::format(" {:+d}", *r.detect_latency_steps)
                                      : fmt::format(" @{}", r.cause.diagnosis.detected_step);
        c += " " + result(r, m);
        wc[j] = std::max(wc[j], c.size());
        cells[i].push_back(std::move(c));
      }
    }
    fmt::format_to(w, "{:<{}}  {:<{}}", "scenario", wn, "truth", wt);
    for (size_t j = 0; j < b.detectors.size(); ++j) fmt::format_to(w, "  {:<{}}", b.detectors[j], wc[j]);
    out += '\n';
    for (size_t i = 0; i < b.runs.size(); ++i) {
      fmt::format_to(w, "{:<{}}  {:<{}}", b.manifests[i].scenario, wn, b.runs[i].front().cause.truth_cause, wt);
      for (size_t j = 0; j < cells[i].size(); ++j) fmt::format_to(w, "  {:<{}}", cells[i][j], wc[j]);
      out += '\n';
    }
    // --- one row per detector ---
    size_t wd = 8;
    for (const auto& d : b.detectors) wd = std::max(wd, d.size());
    fmt::format_to(w, "\n{:<{}}  {:<16}  {:<18}  {:<24}  {:>5}  {:>6}  {}\n", "detector", wd, "cause accuracy",
                   "detection accuracy", "false alarms/healthy run", "early", "errors", "expect missed");
    for (const auto& s : b.summaries) {
      fmt::format_to(w, "{:<{}}  {:<16}  {:<18}  {:<24}  {:>5}  {:>6}  {}/{}\n", s.detector, wd,
                     s.names_causes ? pct(s.suite.correct, s.runs) : "- (names none)", pct(s.detected, s.runs),
                     s.healthy_runs ? fmt::format("{:.2f} ({} of {})", double(s.healthy_alarms) / s.healthy_runs,
                                                  s.healthy_alarms, s.healthy_runs)
                                    : "-",
                     s.early, s.errors, s.expect_failures, s.runs);
    }
    out += "detection latency (first alarm - onset; median / p95 nearest-rank):\n";
    for (const auto& s : b.summaries)
      for (const auto& [cause, l] : s.detect_latency)
        fmt::format_to(w, "  {:<{}}  {:<20} n={:<3} median {:>7} steps {:>8} s   p95 {:>7} steps {:>8} s\n", s.detector,
                       wd, cause, l.n, num(l.median_steps, "{:.1f}"), num(l.median_s, "{:.2f}"),
                       num(l.p95_steps, "{:.0f}"), num(l.p95_s, "{:.2f}"));
    for (const auto& s : b.summaries)
      for (const auto& a : s.alarmed_healthy) fmt::format_to(w, "false alarm on a healthy run: {}: {}\n", s.detector, a);
    for (size_t j = 0; j < b.detectors.size(); ++j)
      for (size_t i = 0; i < b.runs.size(); ++i) {
        const DetectorRunScore& r = b.runs[i][j];
        if (r.error.empty()) continue;
        fmt::format_to(w, "detector error: {} on {}: {}\n", r.detector, b.manifests[i].scenario, r.error);
        if (!r.stderr_tail.empty()) {
          std::string tail = r.stderr_tail;
          for (size_t p = 0; (p = tail.find('\n', p)) != std::string::npos; p += 3) tail.replace(p, 1, "\n  |");
          fmt::format_to(w, "  | {}\n", tail);
        }
      }
  }
  if (!b.corpus_id.empty())
    fmt::format_to(w, "corpus: {} ({} runs, xxh3-128 {})\n", b.corpus_dir, b.manifests.size(), b.corpus_id);
  return out;
}
}  // namespace

// What reaches a terminal: control characters from the input made printable (core/printable.h).
std::string render_scoreboard(const Scoreboard& b) { return printable(render_scoreboard_unescaped(b)); }

std::string to_json(const Scoreboard& b) {
  using nlohmann::json;
  json j = b.summaries.empty() ? json::object() : json::parse(to_json(b.summaries.front().suite));
  j["corpus"] = b.corpus_id.empty() ? json(nullptr) : json({{"id", b.corpus_id}, {"dir", b.corpus_dir}, {"hash", "xxh3-128"}});
  j["detectors"] = json::object();
  for (size_t k = 0; k < b.summaries.size(); ++k) {
    const DetectorSummary& s = b.summaries[k];
    json lat = json::object();
    for (const auto& [c, l] : s.detect_latency)
      lat[c] = {{"n", l.n}, {"median_steps", finite_or_null(l.median_steps)}, {"p95_steps", finite_or_null(l.p95_steps)},
                {"median_s", finite_or_null(l.median_s)}, {"p95_s", finite_or_null(l.p95_s)}};
    json runs = json::array();
    for (size_t i = 0; i < b.runs.size(); ++i) {
      const DetectorRunScore& r = b.runs[i][k];
      json alarms = json::array();
      for (const auto& a : r.alarms)
        alarms.push_back({{"cause", a.cause.empty() ? json(nullptr) : json(a.cause)},
                          {"rank", a.rank},
                          {"step", a.step},
                          {"t", finite_or_null(a.t)},
                          {"line", a.line},
                          {"evidence", a.evidence},
                          {"claimed_step", opt_json(a.claimed_step)},
                          {"confidence", opt_json(a.confidence)}});
      runs.push_back({{"scenario", b.manifests[i].scenario},
                      {"result", result(r, b.manifests[i])},
                      {"said", first_said(r)},
                      {"alarmed", r.alarmed},
                      {"named", r.named},
                      {"detected", r.detected},
                      {"early", r.early},
                      {"detect_latency_steps", opt_json(r.detect_latency_steps)},
                      {"detect_latency_s", opt_json(r.detect_latency_s)},
                      {"expect_met", r.expect_met},
                      {"expect_detail", r.expect_detail},
                      {"error", r.error.empty() ? json(nullptr) : json(r.error)},
                      {"stderr_tail", r.stderr_tail},
                      {"alarms", alarms}});
    }
    j["detectors"][s.detector] = {
        {"cause", json::parse(to_json(s.suite))},
        {"names_causes", s.names_causes},
        {"detection",
         {{"runs", s.runs},
          {"detected", s.detected},
          {"accuracy", s.runs ? double(s.detected) / s.runs : 0.0},
          {"faulty_runs", s.faulty_runs},
          {"faults_detected", s.faults_detected},
          {"healthy_runs", s.healthy_runs},
          {"healthy_alarms", s.healthy_alarms},
          {"false_alarms_per_healthy_run", s.healthy_runs ? double(s.healthy_alarms) / s.healthy_runs : 0.0},
          {"early", s.early},
          {"latency", lat}}},
        {"false_alarms_on", s.alarmed_healthy},
        {"errors", s.errors},
        {"expect_failures", s.expect_failures},
        {"runs", runs}};
  }
  if (b.confirmations_judged > 0) {
    json cs = json::array();
    for (size_t i = 0; i < b.confirmations.size() && i < b.manifests.size(); ++i) {
      const auto& c = b.confirmations[i];
      if (!c) continue;
      json one = {{"scenario", b.manifests[i].scenario}, {"verdict", c->verdict}, {"margin", finite_or_null(c->margin)},
                  {"needed", finite_or_null(c->needed)}, {"reason", c->reason}, {"wall_s", c->wall_s},
                  {"steps_trained", c->steps_trained}, {"right", c->right}};
      cs.push_back(one);
      j["detectors"][kBuiltinDetector]["runs"][i]["confirmed"] = one;
    }
    j["confirmations"] = {{"right", b.confirmations_right}, {"judged", b.confirmations_judged}, {"runs", cs}};
  }
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

std::string to_junit(const Scoreboard& b) {
  int tests = 0, failures = 0, errors = 0;
  double total = 0;
  // a built-in testcase fails for a missed expectation or a wrong confirmation of its diagnosis
  auto confirm_of = [&](size_t i, size_t j) -> const RunConfirmation* {
    return j == 0 && i < b.confirmations.size() && b.confirmations[i] ? &*b.confirmations[i] : nullptr;
  };
  auto fails = [&](size_t i, size_t j) {
    const DetectorRunScore& r = b.runs[i][j];
    const RunConfirmation* c = confirm_of(i, j);
    return r.error.empty() && (!r.expect_met || (c && !c->right));
  };
  for (size_t i = 0; i < b.runs.size(); ++i)
    for (size_t j = 0; j < b.runs[i].size(); ++j) {
      const DetectorRunScore& r = b.runs[i][j];
      ++tests;
      const bool error = !r.error.empty() || r.cause.harness_error;
      failures += fails(i, j) && !error;
      errors += error;
      total += std::isfinite(b.manifests[i].wall_s) ? b.manifests[i].wall_s : 0;
    }
  auto secs = [](double v) { return fmt::format("{:.3f}", std::isfinite(v) ? v : 0.0); };
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  auto w = std::back_inserter(out);
  fmt::format_to(w, "<testsuites name=\"flatline\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">\n", tests,
                 failures, errors, secs(total));
  for (size_t j = 0; j < b.detectors.size(); ++j) {
    int f = 0, e = 0;
    double t = 0;
    for (size_t i = 0; i < b.runs.size(); ++i) {
      const bool error = !b.runs[i][j].error.empty() || b.runs[i][j].cause.harness_error;
      f += fails(i, j) && !error;
      e += error;
      t += std::isfinite(b.manifests[i].wall_s) ? b.manifests[i].wall_s : 0;
    }
    fmt::format_to(w, "  <testsuite name=\"flatline.{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{}\">\n",
                   xml(b.detectors[j]), b.runs.size(), f, e, secs(t));
    if (!b.corpus_id.empty())
      fmt::format_to(w, "    <properties><property name=\"corpus\" value=\"{}\"/></properties>\n", xml(b.corpus_id));
    for (size_t i = 0; i < b.runs.size(); ++i) {
      const DetectorRunScore& r = b.runs[i][j];
      const Manifest& m = b.manifests[i];
      const RunScore& c = r.cause;
      fmt::format_to(w, "    <testcase classname=\"{}.{}\" name=\"{}\" time=\"{}\">\n", xml(b.detectors[j]),
                     xml(c.truth_cause), xml(m.scenario), secs(m.wall_s));
      out += "      <properties>\n";
      auto prop = [&](const char* k, const std::string& v) {
        fmt::format_to(w, "        <property name=\"{}\" value=\"{}\"/>\n", k, xml(v));
      };
      prop("seed", std::to_string(m.seed));
      prop("truth", c.truth_cause);
      prop("active_from", std::to_string(c.active_from));
      prop("onset_step", std::to_string(c.onset_step));
      prop("result", result(r, m));
      prop("detection", first_said(r));
      prop("detected_step", std::to_string(c.diagnosis.detected_step));
      prop("latency_steps", r.detect_latency_steps ? std::to_string(*r.detect_latency_steps) : "");
      prop("latency_s", r.detect_latency_s ? fmt::format("{:.3f}", *r.detect_latency_s) : "");
      prop("alarms", std::to_string(r.alarmed && r.alarms.empty() ? 1 : r.alarms.size()));
      const RunConfirmation* conf = confirm_of(i, j);
      if (conf) {
        prop("confirmed", conf->verdict);
        prop("confirm_margin", std::isfinite(conf->margin) ? fmt::format("{:.6g}", conf->margin) : "");
        prop("confirm_needed", std::isfinite(conf->needed) ? fmt::format("{:.6g}", conf->needed) : "");
      }
      out += "      </properties>\n";
      if (c.harness_error) {  // the harness failed the run: an error, never the detector's failure
        fmt::format_to(w, "      <error message=\"{}\" type=\"harness\">status: {}</error>\n", xml(r.expect_detail),
                       xml(m.status));
      } else if (!r.error.empty()) {
        fmt::format_to(w, "      <error message=\"{}\" type=\"detector_error\">{}</error>\n", xml(r.error),
                       xml(r.stderr_tail));
      } else if (!r.expect_met) {
        std::string body = fmt::format("truth: {}; first alarm: {} at step {}", c.truth_cause, first_said(r),
                                       c.diagnosis.detected_step);
        for (const auto& e : c.diagnosis.evidence) body += "; " + e;
        if (conf && !conf->right) body += "; confirmation: " + conf->verdict + ": " + conf->reason;
        fmt::format_to(w, "      <failure message=\"{}\" type=\"{}\">{}</failure>\n", xml(r.expect_detail),
                       r.cause.false_alarm ? "false_alarm" : "expect", xml(body));
      } else if (conf && !conf->right) {
        fmt::format_to(w, "      <failure message=\"{}\" type=\"confirmation\">{}</failure>\n",
                       xml("confirmation " + conf->verdict + " for diagnosis " + c.diagnosis.cause), xml(conf->reason));
      }
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

}  // namespace flatline
