// data_replay's thresholds, named once (docs/DESIGN.md §2): the detector (detectors/data_replay.cpp, whose
// opening comment states its contract) judges by them, and so does the checklist walk
// (report/checklist_walk.cpp): what explains or repairs the cause reads the detector's own numbers.
#pragma once
#include <cstddef>

namespace flatline::data_replay {

constexpr size_t kWindow = 3;   // consecutive hashed records considered
constexpr int kRepeats = 2;     // repeats within the window that fire

}  // namespace flatline::data_replay
