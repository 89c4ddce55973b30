// run_not_alive's thresholds, named once (docs/DESIGN.md §2): the detector (detectors/run_not_alive.cpp,
// whose opening comment states its contract) judges by them, and so does the checklist walk
// (report/checklist_walk.cpp): what explains or repairs the cause reads the detector's own numbers.
#pragma once
#include <cstddef>

namespace flatline::run_not_alive {

constexpr double kFallbackBound = 10.0;  // s: the least deadline before the median is known
constexpr size_t kMinIntervals = 4;      // 5 step records
constexpr double kSlackSteps = 3.0;      // typical steps of slack
// s: the shortest stall called a hang, whatever the step time. A healthy rank of a fast model on a shared
// host stalls for a fraction of a second now and then (the OS scheduler, a page-in, other jobs on the
// cores: healthy 30 ms steps were called hung after 0.6 s at load 8 on 2 cores); a hang lasts from seconds
// (a collective timeout) to minutes.
constexpr double kMinStallS = 2.0;
constexpr int kStaleRepeats = 3;         // same logged step this many records in a row
constexpr double kSilentBeats = 10;      // heartbeat intervals without any record: a silent rank
constexpr double kMinSilenceS = 2.0;     // s: and at least this (a loaded machine deschedules for ~1 s)
constexpr double kVisibleLatencyS = 1.0; // s: a record with t is visible to a live reader by t + this
constexpr double kSilentNamedBeats = 2;  // evidence: a rank silent this many intervals at the detection

}  // namespace flatline::run_not_alive
