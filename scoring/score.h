// Scoring (docs/DESIGN.md §6). Per run: correct iff the diagnosed cause (and
// rank, where it applies) matches the manifest's first fault and detection is at or after its
// active_from; any diagnosis on a healthy run, or before active_from, is a false alarm.
// Latency = detected_step - onset_step (negative = early warning), and the same in seconds.
// A run that failed for a reason other than its fault (a rank killed or died, the watchdog stopped it,
// it was interrupted, its manifest was never finished) is a harness error: it proves nothing about the
// detectors, so it is neither correct, nor a miss, nor a false alarm; it fails its expectation and is
// reported as an <error> in JUnit, apart from the detectors' failures.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "detectors/triage.h"
#include "telemetry/manifest.h"

namespace flatline {

struct RunScore {
  std::string scenario;
  std::string truth_cause = "healthy";
  int truth_rank = -1;
  int64_t active_from = -1, onset_step = -1;
  Diagnosis diagnosis;
  bool correct = false;
  bool false_alarm = false;
  bool harness_error = false;  // the run failed for a reason other than its fault (see above)
  std::optional<int64_t> latency_steps;
  std::optional<double> latency_s;
  bool expect_met = false;
  std::string expect_detail;   // why expect was not met
  std::string run_status;      // manifest status
  double wall_s = 0;
};

RunScore score_run(const Manifest& m, const Diagnosis& d);

// Whether `d` names the true cause: the same cause, and the same rank where the cause names one and
// the truth has a rank (causes.h names_rank). Timing (active_from) is score_run's, not this.
bool names_true_cause(const Diagnosis& d, const std::string& truth_cause, int truth_rank);

struct CauseLatency {
  int n = 0;
  double median_steps = 0, p95_steps = 0, median_s = 0, p95_s = 0;
};

struct SuiteScore {
  std::vector<RunScore> runs;
  int correct = 0;
  double accuracy = 0;
  int healthy_runs = 0, false_alarms = 0;
  double false_alarms_per_healthy_run = 0;
  int expect_failures = 0;     // harness errors included
  int harness_errors = 0;      // runs not scored: accuracy and the confusion matrix count the others
  std::map<std::string, std::map<std::string, int>> confusion;  // truth -> diagnosed -> count
  std::map<std::string, CauseLatency> latency;                    // per true cause
};

SuiteScore score_suite(std::vector<RunScore> runs);
// The labels of the confusion matrix's rows and columns: the causes that occur in `s`, in the cause
// table's order (with every_checklist_cause, every checklist cause and verdict too), then any cause a
// manifest or diagnosis names that the table does not know.
std::vector<std::string> confusion_labels(const SuiteScore& s, bool every_checklist_cause);
std::string render_table(const SuiteScore& s);   // the scoreboard printed by `flatline score`
std::string to_json(const SuiteScore& s);
std::string to_junit(const SuiteScore& s);       // JUnit XML: one testcase per scenario
// XML 1.0 text; in attributes (attr) line breaks and tabs become character references.
std::string xml_escape(const std::string& s, bool attr = true);

}  // namespace flatline
