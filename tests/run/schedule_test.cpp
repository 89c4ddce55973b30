// LR schedules (run/schedule.h): exact values at named steps. lr(k) is the lr of the k-th update.
#include "run/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace flatline {
namespace {

LrSchedule make(const std::string& kind, int64_t warmup, int64_t total, double min_lr, double peak) {
  ScheduleSpec s;
  s.kind = kind;
  s.warmup = warmup;
  s.total = total;
  s.min_lr = min_lr;
  return LrSchedule(s, peak);
}

TEST(Schedule, WarmupIsLinearFromZero) {
  LrSchedule s = make("cosine", 50, 1000, 3.0e-4, 3.0e-3);
  EXPECT_EQ(s.lr(0), 0.0);
  EXPECT_EQ(s.lr(25), 1.5e-3);  // peak / 2
  EXPECT_EQ(s.lr(1), 3.0e-3 / 50);
  EXPECT_DOUBLE_EQ(s.lr(49), 3.0e-3 * 49 / 50);
  EXPECT_EQ(s.lr(50), 3.0e-3);  // exactly peak at the end of warmup
  EXPECT_EQ(s.lr(-5), 0.0);     // negative k clamps to 0
}

TEST(Schedule, CosineMidpointEndAndTail) {
  const double peak = 3.0e-3, min_lr = 3.0e-4;
  LrSchedule s = make("cosine", 50, 1000, min_lr, peak);
  EXPECT_EQ(s.lr(525), (peak + min_lr) / 2);  // p = 475 / 950 = 0.5
  EXPECT_EQ(s.lr(525), 1.65e-3);
  EXPECT_EQ(s.lr(1000), min_lr);  // lr(total) = min_lr
  EXPECT_EQ(s.lr(1001), min_lr);  // and stays there
  EXPECT_EQ(s.lr(100000), min_lr);
  // Quarter of the way: coeff = (1 + cos(pi / 4)) / 2.
  LrSchedule q = make("cosine", 50, 1050, min_lr, peak);
  EXPECT_DOUBLE_EQ(q.lr(300), min_lr + (peak - min_lr) * 0.5 * (1 + std::sqrt(0.5)));
  EXPECT_DOUBLE_EQ(q.lr(300), 2.604594154601839e-3);
  // Monotone after warmup.
  for (int64_t k = 51; k <= 1000; ++k) EXPECT_LE(s.lr(k), s.lr(k - 1)) << k;
}

TEST(Schedule, EndOfWarmupIsExactlyPeakForEveryPeakAndFloor) {
  // min_lr + (peak - min_lr) is 1 ulp off peak for peak 1e-2, min_lr 1e-3; the schedule must not be.
  for (double peak : {1e-2, 7e-4, 3e-3, 1e-3, 0.1})
    for (double frac : {0.0, 0.01, 0.05, 0.1, 0.2, 0.5}) {
      LrSchedule s = make("cosine", 10, 100, peak * frac, peak);
      EXPECT_EQ(s.lr(10), peak) << peak << " " << frac;
      EXPECT_EQ(s.lr(100), peak * frac) << peak << " " << frac;
      LrSchedule l = make("linear", 10, 100, peak * frac, peak);
      EXPECT_EQ(l.lr(10), peak);
      EXPECT_EQ(l.lr(100), peak * frac);
    }
}

TEST(Schedule, CosineWithoutWarmupStartsAtPeak) {
  LrSchedule s = make("cosine", 0, 100, 0.0, 1.0);
  EXPECT_EQ(s.lr(0), 1.0);
  EXPECT_EQ(s.lr(50), 0.5);
  EXPECT_EQ(s.lr(100), 0.0);
}

TEST(Schedule, Linear) {
  LrSchedule s = make("linear", 0, 100, 0.0, 1.0);
  EXPECT_EQ(s.lr(0), 1.0);
  EXPECT_EQ(s.lr(25), 0.75);
  EXPECT_EQ(s.lr(50), 0.5);
  EXPECT_EQ(s.lr(100), 0.0);
  EXPECT_EQ(s.lr(150), 0.0);
  LrSchedule w = make("linear", 10, 110, 1e-4, 1e-3);
  EXPECT_EQ(w.lr(5), 5e-4);
  EXPECT_EQ(w.lr(10), 1e-3);
  EXPECT_DOUBLE_EQ(w.lr(60), 5.5e-4);
  EXPECT_EQ(w.lr(110), 1e-4);
  EXPECT_EQ(w.lr(111), 1e-4);
}

TEST(Schedule, Constant) {
  LrSchedule s = make("constant", 10, 100, 1e-5, 0.01);
  EXPECT_EQ(s.lr(0), 0.0);
  EXPECT_EQ(s.lr(5), 0.005);
  EXPECT_EQ(s.lr(10), 0.01);
  EXPECT_EQ(s.lr(100), 0.01);  // total and min_lr do not apply
  EXPECT_EQ(s.lr(1000000), 0.01);
  EXPECT_EQ(make("constant", 0, 0, 0, 0.5).lr(0), 0.5);
}

TEST(Schedule, TotalAtOrBeforeWarmupDropsToMinAfterWarmup) {
  LrSchedule s = make("cosine", 10, 10, 1e-4, 1e-3);
  EXPECT_EQ(s.lr(9), 1e-3 * 9 / 10);
  EXPECT_EQ(s.lr(10), 1e-4);
  EXPECT_EQ(make("linear", 10, 5, 0, 1e-3).lr(20), 0.0);
}

}  // namespace
}  // namespace flatline
