// Every scenario shipped in scenarios/ loads, builds its faults, and states an expectation that
// matches its first fault (a clean twin has no faults and expects healthy).
#include <gtest/gtest.h>

#include <filesystem>

#include "faults/fault.h"
#include "faults/scenario_file.h"
#include "run/causes.h"

namespace flatline {
namespace {

TEST(ScenarioFiles, EveryShippedScenarioLoadsAndExpectsItsOwnFault) {
  int n = 0, healthy = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(FLATLINE_SOURCE_DIR) + "/scenarios")) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    Scenario s = load_scenario_file(e.path().string());
    auto faults = make_faults(s);
    ++n;
    if (faults.empty()) {
      EXPECT_EQ(s.expect.cause, "healthy");
      ++healthy;
      continue;
    }
    EXPECT_EQ(s.expect.cause, faults.front()->spec().kind);
    FaultTruth t = faults.front()->truth();
    EXPECT_GE(t.active_from, 1);
    EXPECT_LE(t.active_from, t.onset_step);
    EXPECT_LE(t.onset_step, s.steps);
    if (names_rank(s.expect.cause)) {
      EXPECT_EQ(s.expect.rank, t.rank);
    }
  }
  EXPECT_GE(n, 30);
  EXPECT_GE(healthy, 9);
}

}  // namespace
}  // namespace flatline
