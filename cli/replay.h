// Replay: feeds recorded telemetry (any format read_log reads) through the Triage in recorded order,
// as if live: optionally paced by the records' t (real time, or `speed` times faster), reporting each
// finding as it fires and each checklist line when its state changes. `flatline diagnose` is a replay
// without pacing or printing, so both give the same Diagnosis, and the same as the live run did
// (the detectors do not depend on how ranks interleave: detectors/detector.h).
#pragma once
#include <functional>

#include "detectors/triage.h"
#include "readers/reader.h"

namespace flatline {

struct ReplayOptions {
  bool realtime = false;   // sleep between records for their t difference / speed
  double speed = 1.0;      // > 0
  std::function<void(const Finding&)> on_finding;
  std::function<void(const CheckResult&, int64_t step)> on_check;  // a checklist line changed state
  std::function<void(double seconds)> sleep;                        // default: std::this_thread::sleep_for
};

Diagnosis replay(const LogData& log, const ReplayOptions& o = {});
// The same over a stream (a run too large to hold: readers/reader.h LogStream).
Diagnosis replay(LogStream& log, const ReplayOptions& o = {});

// LogStream + replay without pacing: the post-hoc diagnosis of a file or directory.
Diagnosis diagnose_log(const std::string& path, const std::string& format, Warnings* warnings);

}  // namespace flatline
