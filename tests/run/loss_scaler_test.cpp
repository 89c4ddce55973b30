// The dynamic loss scaler against hand-computed sequences (PyTorch GradScaler semantics).
#include <gtest/gtest.h>

#include "run/loss_scaler.h"

namespace flatline {

TEST(LossScaler, BacksOffHalfAndSkipsOnEveryOverflow) {
  LossScaler s;
  EXPECT_EQ(s.scale, 65536.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale, 8192.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale, 8192.0);
  EXPECT_EQ(s.growth_tracker, 1);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanStepsAndOverflowResetsTheCount) {
  LossScaler s;
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale, 65536.0);
  EXPECT_EQ(s.growth_tracker, 1999);
  s.update(false);  // the 2000th clean step
  EXPECT_EQ(s.scale, 131072.0);
  EXPECT_EQ(s.growth_tracker, 0);
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);  // overflow: halve, reset
  EXPECT_EQ(s.scale, 65536.0);
  EXPECT_EQ(s.growth_tracker, 0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale, 65536.0);
}

TEST(LossScaler, TwentyOverflowsFrom2To16EndAt2ToMinus4) {
  LossScaler s;
  for (int i = 0; i < 20; ++i) s.update(true);
  EXPECT_EQ(s.scale, 0.0625);
}

TEST(LossScaler, ClampHoldsTheScaleDown) {
  LossScaler s;
  s.update(false, 1.0 / 256);
  EXPECT_EQ(s.scale, 1.0 / 256);
  s.growth_interval = 1;
  s.update(false, 1.0 / 256);  // growth would double it; the clamp wins
  EXPECT_EQ(s.scale, 1.0 / 256);
}

TEST(LossScaler, DisabledNeverSkips) {
  LossScaler s;
  s.enabled = false;
  s.scale = 1;
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale, 1.0);
}

}  // namespace flatline
