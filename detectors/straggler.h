// straggler's thresholds, named once (docs/DESIGN.md §2): the detector (detectors/straggler.cpp, whose
// opening comment states its contract) judges by them, and whoever explains its finding reads them here.
#pragma once

namespace flatline::straggler {

constexpr double kSlowFrac = 0.15;   // compute above (1 + k) x the others' median
constexpr double kAbsorbed = 0.5;    // the others' extra comm covers this fraction of the gap
constexpr int kSlowSteps = 10;       // consecutive judged steps (3 fired on scheduler jitter: 3 ranks on 2 cores)

}  // namespace flatline::straggler
