// The cause table (run/causes.h): the checklist order, which causes name a rank, and that the
// table and the detector registry agree row for row.
#include <gtest/gtest.h>

#include <set>

#include "run/causes.h"
#include "detectors/detector.h"
#include "detectors/registry.h"

namespace flatline {
namespace {

TEST(Causes, ChecklistInOrderThenFleetThenVerdicts) {
  EXPECT_EQ(checklist_causes(), (std::vector<std::string>{"run_not_alive", "lr_zero", "data_replay",
                                                          "loss_scale_collapse", "zero_grad_rank"}));
  int last_kind = 0;
  for (const Cause& c : cause_table()) {  // checklist < fleet < verdict, never back
    EXPECT_GE(static_cast<int>(c.kind), last_kind) << c.id;
    last_kind = static_cast<int>(c.kind);
  }
  EXPECT_EQ(cause_ids().back(), "healthy");
}

TEST(Causes, EveryDetectedRowHasItsDetectorAndEveryDetectorItsRow) {
  std::set<std::string> rows;
  for (const Cause& c : cause_table())
    if (c.kind != CauseKind::verdict) {
      rows.insert(c.id);
      EXPECT_EQ(make_detector(c.id, {})->cause(), std::string(c.id));
    }
  const auto reg = registered_detectors();
  EXPECT_EQ(std::set<std::string>(reg.begin(), reg.end()), rows);
  EXPECT_EQ(find_cause("healthy")->kind, CauseKind::verdict);
  EXPECT_EQ(find_cause("no_such_cause"), nullptr);
}

TEST(Causes, RankNamingAndDrillSignals) {
  EXPECT_TRUE(names_rank("zero_grad_rank"));
  EXPECT_TRUE(names_rank("straggler"));
  EXPECT_FALSE(names_rank("lr_zero"));
  EXPECT_FALSE(names_rank("nonsense"));
  EXPECT_EQ(cause_with_rank("zero_grad_rank", 3, " rank "), "zero_grad_rank rank 3");
  EXPECT_EQ(cause_with_rank("zero_grad_rank", -1, " rank "), "zero_grad_rank");
  EXPECT_EQ(cause_with_rank("lr_zero", 3, " rank "), "lr_zero");
  std::set<std::string> signals;  // each checklist cause has its own drill signal
  for (const auto& id : checklist_causes()) {
    const std::string sig = find_cause(id)->drill_signal;
    EXPECT_FALSE(sig.empty()) << id;
    EXPECT_TRUE(signals.insert(sig).second) << id;
  }
  EXPECT_TRUE(is_healthy("healthy"));
  EXPECT_TRUE(is_healthy(""));
  EXPECT_FALSE(is_healthy("lr_zero"));
}

}  // namespace
}  // namespace flatline
