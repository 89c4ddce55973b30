// zero_grad_rank's thresholds, named once (docs/DESIGN.md §2): the detector (detectors/zero_grad_rank.cpp,
// whose opening comment states its contract) judges by them, and so does the checklist walk
// (report/checklist_walk.cpp): what explains or repairs the cause reads the detector's own numbers.
#pragma once

namespace flatline::zero_grad_rank {

constexpr double kZeroFrac = 1e-12;   // "zero" relative to the largest other rank
constexpr int kZeroSteps = 2;         // consecutive judged steps

}  // namespace flatline::zero_grad_rank
