// loss_scale_collapse's thresholds, named once (docs/DESIGN.md §2): the detector
// (detectors/loss_scale_collapse.cpp, whose opening comment states its contract) judges by them, and so does
// the checklist walk (report/checklist_walk.cpp): what explains or repairs the cause reads the detector's
// own numbers.
#pragma once
#include <cstdint>

namespace flatline::loss_scale_collapse {

constexpr int kSkipStreak = 3;         // consecutive skipped steps after the first applied one
constexpr int kUnexplained = 2;        // of which overflowed at a scale the gradients fit in
constexpr double kFp16Max = 65504.0;   // largest finite IEEE binary16 value
constexpr int kBlindStreak = 10;       // streak that fires when no grad_norm tells explained from not
constexpr int kInitialSearchMax = 30;  // longest healthy initial scale search
constexpr double kLowScale = 1.0;      // a scale below this multiplies gradients down
constexpr double kZeroFrac = 0.5;      // grad_zero_frac that means underflow
constexpr int kLowSteps = 2;           // consecutive low-scale + underflow steps
constexpr double kFarAboveFloor = 16;  // an initial search reaching below this is no longer healthy
constexpr double kFloor = 1.0;         // DeepSpeed min_loss_scale, Megatron --min-loss-scale defaults
constexpr int kFloorOverflows = 3;     // overflows in a row at an unchanged (or <= floor) scale
constexpr double kZeroRise = 0.05;     // grad_zero_frac above its level at scale >= 1
constexpr int kFalls = 2;              // consecutive falling records below 1 (no overflow flags)
constexpr double kSkipFraction = 0.2;  // (h) share of steps skipped between two opt_step counts
constexpr int64_t kCountedSkips = 10;  // (h) and at least this many beyond the initial search

}  // namespace flatline::loss_scale_collapse
