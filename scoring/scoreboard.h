// The scoreboard of several detectors side by side on one suite or corpus (docs/DETECTORS.md): the
// built-in suite (always, under the name "flatline") and every external detector, each scored per run
// against the run's manifest.
//
// How an external detector's alarms are scored: the first alarm decides; later ones are reported.
//  - cause level (score.h, score_run): the first alarm is the diagnosis, stamped by the harness; a
//    first alarm without a cause is the pseudo-cause "alarm", so it is never correct on a faulty run and
//    is a false alarm on a healthy one.
//  - detection level (only "something is wrong"): a faulty run is detected iff the first alarm is at or
//    after the fault's active_from (before it: a false alarm, early); a healthy run is correct iff no
//    alarm. Latency = first alarm's step - onset_step, and the same in seconds.
//  - expectation (the scenario's `expect`): judged on the cause when the first alarm names one (or there
//    is none), on detection alone when it does not (alarm at/after active_from, latency <= within_steps).
//  - a detector error (external.h) scores the run "detector error": neither correct nor a false alarm,
//    the expectation missed, the reason kept.
#pragma once
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "external/feed.h"
#include "scoring/score.h"
#include "telemetry/manifest.h"

namespace flatline {

constexpr const char* kBuiltinDetector = "flatline";  // the built-in suite's name on every scoreboard
constexpr const char* kUnnamedAlarm = "alarm";        // a first alarm that names no cause

struct DetectorRunScore {
  std::string detector;
  RunScore cause;                        // cause-level verdict (its diagnosis = the first alarm)
  bool alarmed = false;                  // any alarm (built-in: a diagnosis other than healthy)
  bool named = false;                    // the first alarm names a cause
  bool detected = false;                 // detection level: correct (healthy and silent, or faulty and detected)
  bool early = false;                    // first alarm before active_from on a faulty run
  std::optional<int64_t> detect_latency_steps;
  std::optional<double> detect_latency_s;
  bool expect_met = false;
  std::string expect_detail;
  std::string error;                     // detector error, "" if none
  std::vector<ExternalAlarm> alarms;     // every alarm (external detectors)
  std::string stderr_tail;
};

DetectorRunScore score_builtin_run(const Manifest& m, const Diagnosis& d);
DetectorRunScore score_external_run(const Manifest& m, const ExternalOutcome& o);

struct DetectorSummary {
  std::string detector;
  SuiteScore suite;                      // cause level, over every run (score.h)
  int runs = 0, detected = 0, faulty_runs = 0, faults_detected = 0, healthy_runs = 0, healthy_alarms = 0, early = 0;
  int errors = 0, expect_failures = 0;
  int harness_errors = 0;                // runs that failed other than by their fault (score.h): in no rate
  bool names_causes = false;             // some first alarm named a cause
  std::vector<std::string> alarmed_healthy;  // "scenario: what it said at step S", one per look-alike alarmed on
  std::map<std::string, CauseLatency> detect_latency;  // per true cause, detected runs only
};

// A confirmation of the built-in diagnosis of a run (`flatline score --confirm`, docs/DESIGN.md §14),
// judged against the truth: right when it confirms a diagnosis that names the true cause (and rank), or
// does not confirm one that does not; nothing to confirm (a healthy diagnosis) is right as it stands
// (a missed fault is the detector's miss, scored above); ambiguous (the control did not reproduce the
// run) never is.
struct RunConfirmation {
  std::string verdict;    // confirmed | not confirmed | ambiguous | nothing to confirm (confirm/confirm.h)
  double margin = std::numeric_limits<double>::quiet_NaN();  // control - repaired, mean of the last K steps
  double needed = std::numeric_limits<double>::quiet_NaN();  // what the margin had to exceed
  std::string reason;     // one line
  double wall_s = 0;
  int64_t steps_trained = 0;  // by its replays
  bool right = false;     // set by make_scoreboard
};

struct Scoreboard {
  std::string corpus_id, corpus_dir;     // "" when the runs were trained now without --out's corpus
  std::vector<Manifest> manifests;       // one per run
  std::vector<std::string> detectors;    // the built-in first, then the external ones in the order given
  std::vector<std::vector<DetectorRunScore>> runs;  // [run][detector]
  std::vector<DetectorSummary> summaries;           // [detector]
  std::vector<std::optional<RunConfirmation>> confirmations;  // [run]: --confirm's; empty without it
  int confirmations_right = 0, confirmations_judged = 0;
};

// Aggregates `runs` ([run][detector], detectors in the same order in every row), and judges the
// built-in diagnosis' confirmations (`confirmations`: none, or one per run).
Scoreboard make_scoreboard(std::vector<Manifest> manifests, std::vector<std::vector<DetectorRunScore>> runs,
                           std::vector<std::optional<RunConfirmation>> confirmations = {});

// The printed scoreboard: the built-in suite's table (render_table), its confirmations (the "confirmed"
// column, with --confirm), then, with external detectors, each one's table and the side-by-side
// comparison; the corpus it was computed on.
std::string render_scoreboard(const Scoreboard& b);
// The built-in suite's JSON (to_json(SuiteScore)) plus "corpus" and "detectors" (every detector's
// cause-level suite, detection level, errors and alarms).
std::string to_json(const Scoreboard& b);
// JUnit XML: one testsuite per detector, one testcase per scenario x detector; a missed expectation is
// a <failure> (message: what was expected and what came), a detector error an <error
// type="detector_error">, a run the harness failed an <error type="harness">; properties:
// onset, active_from, detection, latency, seed, alarms; with --confirm, the built-in's testcases also
// carry confirmed, confirm_margin and confirm_needed, and a wrong confirmation is a <failure>.
std::string to_junit(const Scoreboard& b);

}  // namespace flatline
