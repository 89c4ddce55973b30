// An external detector as the command line names it, and the alarms it writes (docs/DETECTORS.md): one
// JSON object a line on its stdout, checked here before the feed (external/feed.h) stamps and keeps it.
//
// Alarm line: {"cause": "lr_zero", "rank": 1, "evidence": ["lr = 0 since step 160"], "step": 163,
//   "confidence": 0.9}; every key optional. No `cause` (or null) = detection only ("something is
//   wrong"). `step` is the detector's own claim, reported but never used (the harness stamps each alarm).
//   An unknown key, a cause that is not a detector id, a rank outside the world size or a line that is
//   not a JSON object is a detector error ("garbage"), so a typo never turns silently into a
//   detection-only alarm.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace flatline {

constexpr size_t kMaxDetectorNameBytes = 64;

struct ExternalDetectorSpec {
  std::string name;     // letters, digits, '.', '_', '-', at most kMaxDetectorNameBytes (it names files and JUnit suites)
  std::string command;  // run through /bin/sh -c (shell_script, core/supervisor.h)
};

// "NAME=COMMAND" -> spec. Throws std::invalid_argument saying what is wrong.
ExternalDetectorSpec parse_detector_spec(const std::string& s);

// The cause ids an alarm may name: every cause of the cause table but "healthy" (run/causes.h),
// in table order: the checklist's and the fleet's causes, and the verdict unexplained_plateau (a plateau
// no check explains), each scored as the built-in suite's same verdict is.
const std::vector<std::string>& alarm_causes();

struct ExternalAlarm {
  std::string cause;                    // "" = detection only
  int rank = -1;
  std::vector<std::string> evidence;
  std::optional<int64_t> claimed_step;  // the detector's own `step`, reported only
  std::optional<double> confidence;
  int64_t step = -1;                    // the harness's stamp (see the header)
  double t = std::numeric_limits<double>::quiet_NaN();
  size_t line = 0;                      // 1-based line of the detector's stdout
};

// Parses one stdout line (line_no, 1-based) into `a` (its stamp left alone). Returns "" when it is an
// alarm, else why it is garbage ("garbage on stdout line 3: 'rank' must be an integer in [0, 2), got 7").
// `causes`: alarm_causes(); a blank line is no alarm and no error (returns "" with a.line = 0).
std::string parse_alarm(std::string_view line, size_t line_no, int world_size, const std::set<std::string>& causes,
                        ExternalAlarm& a);

}  // namespace flatline
