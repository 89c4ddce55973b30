// RankClocks (detectors/rank_clock.h): the heartbeat spacings a quiet beat leaves to the phase history
// and settle_hb() takes in, a folded run judged whole (quiet_run), the phase history's length against its
// wider storage; exact values against the same arithmetic done here.
#include "detectors/rank_clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace flatline::detail {
namespace {

constexpr double kMin = 2.0;  // run_not_alive's kMinStallS: no step deadline is shorter

double median(std::vector<double> v) { return median_in_place(v.data(), v.data() + v.size()); }

// Rank 0 with a step at t=step_t and a first heartbeat at t0 (the slow path: no spacing yet).
RankClocks started(double step_t, double t0) {
  RankClocks c;
  c.see(0);
  c.clock(0, step_t);
  c.on_step(0, step_t, 1, false, 0);
  c.latest_t[0] = step_t;
  c.clock(0, t0);
  EXPECT_TRUE(c.on_heartbeat(0, t0, kPhaseCompute));
  c.latest_t[0] = std::max(c.latest_t[0], t0);
  return c;
}

TEST(RankClocks, QuietBeatsSpacingsAreTakenFromThePhaseHistoryExactly) {
  RankClocks c = started(100.0, 100.01);
  std::vector<double> gaps;
  double t = 100.01;
  for (int k = 0; k < 40; ++k) {  // uneven spacings, all within kDeadGap and within kMin of the step
    const double next = t + 0.01 + 0.0007 * (k % 5);
    ASSERT_TRUE(c.quiet_beat(0, next, kPhaseCollective, kMin)) << k;
    gaps.push_back(next - t);
    t = next;
  }
  const std::vector<double> last32(gaps.end() - 32, gaps.end());
  EXPECT_EQ(c.hb_ivs(0), 32u);
  EXPECT_EQ(c.heartbeat_interval(0), median(last32));
  EXPECT_EQ(c.hb_iv_min(0), *std::min_element(last32.begin(), last32.end()));
  EXPECT_EQ(c.last_hb_t[0], t);
  // A slow-path beat after them pushes its own spacing after the settled ones.
  const double slow = t + 0.5;
  c.clock(0, slow);
  EXPECT_TRUE(c.on_heartbeat(0, slow, kPhaseCompute));
  gaps.push_back(slow - t);
  const std::vector<double> now32(gaps.end() - 32, gaps.end());
  EXPECT_EQ(c.heartbeat_interval(0), median(now32));
  EXPECT_EQ(c.hb_iv_min(0), *std::min_element(now32.begin(), now32.end()));
  // Then a gap of 3 s (> kDeadGap and > 4 intervals): a new process, no spacing pushed, last_hb_t restarted.
  c.clock(0, slow + 3.0);
  EXPECT_TRUE(c.on_heartbeat(0, slow + 3.0, kPhaseCompute));
  EXPECT_EQ(c.heartbeat_interval(0), median(now32));
  EXPECT_EQ(c.since_start[0], 0);
  EXPECT_EQ(c.phase_at(0, slow + 3.0), std::optional<uint8_t>(kPhaseCompute));
  EXPECT_EQ(c.phase_at(0, slow - 0.001), std::optional<uint8_t>(kPhaseCollective));
}

TEST(RankClocks, AFoldedRunIsQuietWholeOrNotAtAll) {
  RankClocks c = started(10.0, 10.05);
  double t_last = 0;
  // 15 beats 0.1 s apart from 10.15: the last at ~11.55 <= 10 + kMin: all quiet.
  ASSERT_TRUE(c.quiet_run(0, 10.15, 0.1, 15, kPhaseCompute, kMin, &t_last));
  std::vector<double> times{10.05}, gaps;
  for (double t = 10.15; times.size() < 16; t += 0.1) times.push_back(t);
  for (size_t k = 1; k < times.size(); ++k) gaps.push_back(times[k] - times[k - 1]);
  EXPECT_EQ(t_last, times.back());
  EXPECT_EQ(c.last_hb_t[0], times.back());
  EXPECT_EQ(c.latest_t[0], times.back());
  EXPECT_EQ(c.hb_ivs(0), 15u);
  EXPECT_EQ(c.heartbeat_interval(0), median(gaps));
  EXPECT_EQ(c.phase_at(0, times[7]), std::optional<uint8_t>(kPhaseCompute));
  // A run that crosses last step + kMin (the deadline's least value) is not quiet: nothing changes.
  const RankClocks before = c;
  EXPECT_FALSE(c.quiet_run(0, t_last + 0.1, 0.1, 10, kPhaseCompute, kMin, &t_last));
  // ...nor one whose beats stop for longer than kDeadGap inside it, nor a pause phase.
  EXPECT_FALSE(c.quiet_run(0, times.back() + 0.1, 2.5, 2, kPhaseCompute, kMin, &t_last));
  EXPECT_FALSE(c.quiet_run(0, times.back() + 0.1, 0.1, 2, kPhaseCheckpoint, kMin, &t_last));
  EXPECT_EQ(c.last_hb_t, before.last_hb_t);
  EXPECT_EQ(c.latest_t, before.latest_t);
  EXPECT_EQ(c.hb_pushes, before.hb_pushes);
  EXPECT_EQ(c.heartbeat_interval(0), median(gaps));
  EXPECT_EQ(c.phase_at(0, 1e9), std::optional<uint8_t>(kPhaseCompute));
}

TEST(RankClocks, ThePhaseHistoryHoldsItsLengthWhateverItsStorage) {
  // world 0: 4096 heartbeats of history (in 8192 slots). 5000 quiet beats, one phase id each by index:
  // the latest at or before a time is found among the last 4096 only.
  RankClocks c = started(0.0, 0.001);
  const size_t cap = RankClocks::phase_history(0);
  ASSERT_EQ(cap, 4096u);
  std::vector<double> times;
  double t = 0.001;
  for (int k = 0; k < 5000; ++k) {
    t += 0.0001;
    c.last_step_t[0] = t;  // a step just before each beat keeps it within kMin of the step
    ASSERT_TRUE(c.quiet_beat(0, t, static_cast<uint8_t>(k % 4), kMin)) << k;
    times.push_back(t);
  }
  // 5001 beats remembered (the first one's included): the history is beats 905.. of the 5000 above
  const size_t oldest = 5001 - cap - 1;
  EXPECT_EQ(c.phase_at(0, times[oldest]), std::optional<uint8_t>(static_cast<uint8_t>(oldest % 4)));
  EXPECT_EQ(c.phase_at(0, times[oldest - 1]), std::nullopt);
  EXPECT_EQ(c.phase_at(0, times[4321]), std::optional<uint8_t>(static_cast<uint8_t>(4321 % 4)));
  EXPECT_EQ(c.hb_ivs(0), RankClocks::kBeatRing);
  double least = INFINITY;  // of the last 32 spacings
  for (size_t k = times.size() - 32; k < times.size(); ++k) least = std::min(least, times[k] - times[k - 1]);
  EXPECT_EQ(c.hb_iv_min(0), least);
}

}  // namespace
}  // namespace flatline::detail
