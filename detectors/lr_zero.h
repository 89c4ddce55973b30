// lr_zero's thresholds, named once (docs/DESIGN.md §2): the detector (detectors/lr_zero.cpp, whose opening
// comment states its contract) judges by them, and so does the checklist walk (report/checklist_walk.cpp),
// the drill's lr view (report/drill_views.cpp) and the repair (confirm/lr_zero.cpp): what explains or
// repairs the cause reads the detector's own numbers.
#pragma once
#include <cstdint>

namespace flatline::lr_zero {

constexpr double kLowFrac = 1e-3;       // lr below this fraction of the peak is "zero"
constexpr int kLowSteps = 2;            // consecutive distinct low steps after the peak
constexpr double kZeroLr = 1e-12;       // "exactly zero" for a warmup that never left 0
constexpr int kStuckWarmupSteps = 3;    // consecutive applied steps at 0 with no peak yet
constexpr double kStillRatio = 1e-9;    // update_norm / param_norm of a frozen model
constexpr int kStillSteps = 3;
constexpr double kPlannedTail = 0.03;   // the last 3% of a planned run ...
constexpr int64_t kMinPlannedTail = 3;  // ... and at least 3 steps: a schedule ending on schedule

}  // namespace flatline::lr_zero
