// run_not_alive: silent during warm-up, silent on healthy noise and on its look-alikes (checkpoint
// and eval pauses, a restart, the end of the stream), fires on a hang, on stale logging and on a
// collective-timeout error; the same finding whatever the interleaving of ranks.
#include <gtest/gtest.h>

#include "core/protocol.h"
#include "detectors/run_not_alive.h"
#include "detectors/util.h"
#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr const char* kCause = "run_not_alive";

double step_t(const std::vector<std::vector<Record>>& rs, int rank, int64_t step) {
  for (const auto& r : rs[rank])
    if (r.kind == RecordKind::step && r.step == step) return r.t;
  return std::nan("");
}

// --- 1. warm-up ----------------------------------------------------------------------------------
TEST(RunNotAliveDetector, SilentDuringWarmupWithSlowFirstStep) {
  for (uint64_t seed : {1, 2, 3}) {
    Spec sp;
    sp.seed = seed;
    sp.steps = 40;
    sp.first_step_s = 7.0;  // start-up work before the first step: below the 10 s start-up bound
    auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
    EXPECT_FALSE(d->finding()) << "seed " << seed << ": " << d->finding()->evidence[0];
    EXPECT_EQ(d->check().state, CheckState::pass);
  }
}

TEST(RunNotAliveDetector, FiresWhenTheFirstStepNeverCompletes) {
  // The first step's allowance (kFirstStepAllowanceS, 120 s) is longer than this collective timeout: the
  // peers' timeout error names it, at 15 s.
  Spec sp;
  sp.steps = 40;
  sp.hang_at = 1;  // blocks before the first all-reduce
  sp.hang_timeout_s = 15;
  auto f = run_finding(kCause, sp, Order::by_time, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 1);
  EXPECT_EQ(f->onset_step, 1);
  EXPECT_NEAR(f->detected_t, 15.0, 0.2);
  EXPECT_NE(f->evidence[0].find("timed out"), std::string::npos) << f->evidence[0];
}

// No error ever comes (a first step that blocks past any timeout): the heartbeats name it once the
// first step's allowance has passed, not before.
TEST(RunNotAliveDetector, AFirstStepPastItsAllowanceIsAHang) {
  Spec sp;
  sp.steps = 40;
  sp.hang_at = 1;
  sp.hang_timeout_s = 400;
  auto f = run_finding(kCause, sp, Order::by_time, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 1);
  EXPECT_GT(f->detected_t, kFirstStepAllowanceS);
  EXPECT_LE(f->detected_t, kFirstStepAllowanceS + 1.0);
  EXPECT_NE(f->evidence[0].find("first step's allowance"), std::string::npos) << f->evidence[0];
}

// Steps slow from the start (a large model: 12 s and more, the first 30 s) are no hang, at any point of
// the warm-up; and a hang among them is named by their own length: 3 steps and a heartbeat, not the
// 10 s a fast run gets.
TEST(RunNotAliveDetector, StepsSlowFromTheStartAreNoHangAndAHangAmongThemIsJudgedByThem) {
  for (double step_s : {12.0, 45.0}) {
    Spec sp;
    sp.steps = 12;
    sp.step_s = step_s;
    sp.first_step_s = 2.5 * step_s;
    auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
    EXPECT_FALSE(d->finding()) << step_s << " s steps: " << d->finding()->evidence[0];
    sp.hang_at = 8;  // warm by then: 3 medians + a heartbeat
    sp.hang_timeout_s = 10 * step_s;
    auto f = run_finding(kCause, sp, Order::by_time, 2);
    ASSERT_TRUE(f) << step_s;
    EXPECT_EQ(f->detected_step, 8);
    const double stalled_from = step_t(generate(sp), 0, 7);
    EXPECT_GT(f->detected_t - stalled_from, 3 * step_s * 0.9) << step_s;
    EXPECT_LT(f->detected_t - stalled_from, 3 * step_s * 1.1 + 1.0) << step_s;
  }
  // before the median: the longest step shown sets the bound (the second step hangs)
  Spec sp;
  sp.steps = 12;
  sp.step_s = 12;
  sp.first_step_s = 20;
  sp.hang_at = 2;
  sp.hang_timeout_s = 300;
  auto f = run_finding(kCause, sp, Order::by_time, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 2);
  const double stalled_from = step_t(generate(sp), 0, 1);
  EXPECT_GT(f->detected_t - stalled_from, 3 * 20.0);         // 3 x the first step (20 s, start-up included)
  EXPECT_LT(f->detected_t - stalled_from, 3 * 20.0 + 1.0);  // and a heartbeat
  EXPECT_NE(f->evidence[0].find("longest step so far"), std::string::npos) << f->evidence[0];
}

// --- 2. healthy noise and look-alikes -------------------------------------------------------------
TEST(RunNotAliveDetector, SilentOnHealthyNoise) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Spec sp;
    sp.seed = seed;
    for (auto o : {Order::by_time, Order::chunked}) {
      auto d = run_detector(kCause, interleave(generate(sp), o, seed), 2);
      EXPECT_FALSE(d->finding()) << "seed " << seed << ": " << d->finding()->evidence[0];
      EXPECT_EQ(d->check().state, CheckState::pass) << d->check().detail;
    }
  }
}

TEST(RunNotAliveDetector, SilentOnCheckpointAndEvalPauses) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.checkpoint_at = {50, 100, 150, 200};
    sp.eval_at = {75, 150, 250};
    sp.pause_s = 3.0;
    auto f = run_finding(kCause, sp, Order::by_time, 2);
    EXPECT_FALSE(f) << "seed " << seed << ": " << f->evidence[0];
  }
}

TEST(RunNotAliveDetector, SilentOnPausesWithoutPhasesWhenEventsMarkThem) {
  Spec sp;
  sp.eval_at = {100};
  sp.checkpoint_at = {200};
  auto rs = generate(sp);
  for (auto& rank : rs)  // a logger without phases: only the events say a pause is on
    for (auto& r : rank)
      if (r.kind == RecordKind::heartbeat) r.phase = "";
  auto d = run_detector(kCause, interleave(rs, Order::by_time), 2);
  EXPECT_FALSE(d->finding()) << d->finding()->evidence[0];
}

TEST(RunNotAliveDetector, SilentOnPausesMarkedOnlyByHeartbeatPhases) {
  Spec sp;
  sp.eval_at = {100};
  sp.checkpoint_at = {200};
  auto rs = generate(sp);
  for (auto& rank : rs)  // no checkpoint_save / eval_start / eval_end events, no eval records
    rank.erase(std::remove_if(rank.begin(), rank.end(),
                              [](const Record& r) {
                                return r.kind == RecordKind::eval || r.name == "checkpoint_save" ||
                                       r.name == "eval_start" || r.name == "eval_end";
                              }),
               rank.end());
  auto d = run_detector(kCause, interleave(rs, Order::by_time), 2);
  EXPECT_FALSE(d->finding()) << d->finding()->evidence[0];
}

TEST(RunNotAliveDetector, SilentOnRestartReemittingSteps) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.checkpoint_at = {100};
    sp.restart_after = 130;
    sp.restart_from = 100;
    auto f = run_finding(kCause, sp, Order::by_time, 2);
    EXPECT_FALSE(f) << "seed " << seed << ": " << f->evidence[0];
  }
}

TEST(RunNotAliveDetector, SilentOnCrashRestartWithoutEvents) {
  Spec sp;
  sp.checkpoint_at = {100};
  sp.restart_after = 130;
  sp.restart_from = 100;
  sp.restart_events = false;  // only the gap in heartbeats shows that the processes were replaced
  sp.startup_s = 6.0;
  auto f = run_finding(kCause, sp, Order::by_time, 2);
  EXPECT_FALSE(f) << f->evidence[0];
}

TEST(RunNotAliveDetector, EndOfStreamIsNotAHang) {
  Spec sp;
  sp.steps = 100;
  auto recs = interleave(generate(sp), Order::by_time);
  recs.resize(recs.size() / 2);  // the stream stops mid-run: no run_end, no more heartbeats
  auto d = make_detector(kCause, {2});
  for (const auto& r : recs) d->observe(r);
  d->finish(recs.back().t);  // a log read to its end: the run ended with its last record
  EXPECT_FALSE(d->finding());
}

// The end of the run is the launcher's clock, not the last record: ranks silent for ten heartbeats
// before it are named (every rank SIGSTOPped, then killed).
TEST(RunNotAliveDetector, LivenessIsJudgedAgainstTheEndOfTheRun) {
  Spec sp;
  sp.steps = 100;
  auto recs = interleave(generate(sp), Order::by_time);
  recs.resize(recs.size() / 2);
  const double last = recs.back().t;
  for (double gap : {4.9, 5.1}) {  // heartbeats every 0.5 s: the bound is 10 of them, 5 s
    auto d = make_detector(kCause, {2});
    for (const auto& r : recs) d->observe(r);
    d->finish(last + gap);
    if (gap < 5) {
      EXPECT_FALSE(d->finding()) << d->finding()->evidence[0];
      continue;
    }
    auto f = d->finding();
    ASSERT_TRUE(f);
    EXPECT_NEAR(f->detected_t, last + 5.0, 0.6);
    EXPECT_NE(f->evidence[0].find("wrote nothing for"), std::string::npos) << f->evidence[0];
    EXPECT_NE(f->evidence[0].find("no rank has written a record since"), std::string::npos) << f->evidence[0];
  }
}

// Live: the launcher's clock (advance) names a rank that stopped while its peer waits for it, before
// the run ends; and nothing while the silence is shorter than the bound.
TEST(RunNotAliveDetector, ASilentRankIsNamedLiveOnTheLaunchersClock) {
  Spec sp;
  sp.steps = 200;
  auto rs = generate(sp);
  const double stop = step_t(rs, 1, 80);
  std::vector<Record> recs;
  for (const auto& r : interleave(rs, Order::by_time))
    if (r.rank == 0 || r.t <= stop) recs.push_back(r);  // rank 1 stopped (SIGSTOP) after step 80
  auto d = make_detector(kCause, {2});
  double t = 0;
  for (const auto& r : recs) {
    if (r.t > stop + 6) break;
    d->observe(r);
    t = r.t;
    d->advance(t);
    if (t < stop + 5) EXPECT_FALSE(d->finding()) << t << ": " << d->finding()->evidence[0];
  }
  auto f = d->finding();
  ASSERT_TRUE(f) << "up to t=" << t;
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->onset_step, 81);
  EXPECT_NE(f->evidence[0].find("rank 1 wrote nothing for"), std::string::npos) << f->evidence[0];
}

// The launcher's `stopped` event for a rank it killed is not a sign of life: the rank's silence before
// it is judged at its t (a replay of the run directory finds what the live launcher found).
TEST(RunNotAliveDetector, TheLaunchersStoppedEventIsNoSignOfLife) {
  Spec sp;
  sp.steps = 100;
  auto recs = interleave(generate(sp), Order::by_time);
  recs.resize(recs.size() / 2);
  const double last = recs.back().t;
  for (int r = 0; r < 2; ++r) {
    Record e;
    e.kind = RecordKind::event;
    e.rank = r;
    e.t = last + 30;
    e.name = "stopped";
    e.detail = "no record from any rank for 30 s: every rank stopped by the launcher";
    recs.push_back(e);
  }
  auto d = make_detector(kCause, {2});
  for (const auto& r : recs) d->observe(r);
  d->finish(last + 30);
  auto f = d->finding();
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->detected_t, last + 5.0, 0.6);
}

// --- 3. injected faults ---------------------------------------------------------------------------
TEST(RunNotAliveDetector, FiresOnHangInCollective) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.hang_at = 121;  // rank 1 blocks before the all-reduce of step 121; rank 0 waits in it
    sp.hang_rank = 1;
    auto rs = generate(sp);
    auto f = run_detector(kCause, interleave(rs, Order::by_time), 2)->finding();
    ASSERT_TRUE(f) << "seed " << seed;
    EXPECT_EQ(f->cause, "run_not_alive");
    EXPECT_EQ(f->rank, -1);
    EXPECT_EQ(f->detected_step, 121);  // the stalled step: not before the fault's first step
    EXPECT_EQ(f->onset_step, 121);
    // max(the 2 s floor, 3 median steps (~0.6 s) + one heartbeat interval (0.5 s)), noticed by the next
    // heartbeat (every 0.5 s).
    const double stalled = f->detected_t - step_t(rs, 0, 120);
    EXPECT_GT(stalled, 2.0);
    EXPECT_LT(stalled, 2.6);
    ASSERT_EQ(f->evidence.size(), 1u);
    EXPECT_NE(f->evidence[0].find("after step 120 (median step 0.2"), std::string::npos) << f->evidence[0];
    EXPECT_NE(f->evidence[0].find("heartbeats continue; rank 0 phase=collective, rank 1 phase=compute"),
              std::string::npos)
        << f->evidence[0];
  }
}

TEST(RunNotAliveDetector, FiresOnStaleLogging) {
  for (int rank : {0, 1}) {
    Spec sp;
    sp.stale_from = 200;  // from step 200 the rank logs step 199 and its loss again
    sp.stale_rank = rank;
    auto f = run_finding(kCause, sp, Order::by_time, 2);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->onset_step, 200);
    EXPECT_EQ(f->detected_step, 201);  // the third record logging 199 is the one of step 201
    EXPECT_EQ(f->rank, -1);
    EXPECT_NE(f->evidence[0].find("step 199 logged 3 times in a row by rank " + std::to_string(rank)),
              std::string::npos)
        << f->evidence[0];
    EXPECT_NE(f->evidence[0].find("opt_step advanced 199 -> 201"), std::string::npos) << f->evidence[0];
  }
}

TEST(RunNotAliveDetector, DuplicatedLinesAreNotStaleLogging) {
  Spec sp;
  auto rs = generate(sp);
  std::vector<Record> dup;
  for (const auto& r : rs[0]) {
    dup.push_back(r);
    if (r.kind == RecordKind::step) dup.push_back(r), dup.push_back(r);  // the same line three times
  }
  rs[0] = dup;
  EXPECT_FALSE(run_detector(kCause, interleave(rs, Order::by_time), 2)->finding());
}

TEST(RunNotAliveDetector, FiresOnCollectiveTimeoutErrorWithoutHeartbeats) {
  Spec sp;
  sp.heartbeats = false;
  sp.hang_at = 50;
  sp.hang_timeout_s = 30;
  auto rs = generate(sp);
  auto d = run_detector(kCause, interleave(rs, Order::by_time), 2);
  auto f = d->finding();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->detected_step, 50);
  EXPECT_EQ(f->onset_step, 50);
  EXPECT_NEAR(f->detected_t, step_t(rs, 0, 49) + 30, 0.01);
  EXPECT_NE(f->evidence[0].find("error on rank 0 after step 49: collective operation timed out"), std::string::npos)
      << f->evidence[0];
}

TEST(RunNotAliveDetector, CannotRunWithoutHeartbeatsOrTime) {
  Spec sp;
  sp.heartbeats = false;
  sp.with_t = false;
  auto d = run_detector(kCause, interleave(generate(sp), Order::round_robin), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::cannot_run);
  EXPECT_EQ(d->check().detail, "missing heartbeats and t: log a wall-clock heartbeat from a watchdog thread");
}

TEST(RunNotAliveDetector, StaleLoggingFoundWithoutTimeFromOptStep) {
  Spec sp;
  sp.heartbeats = false;
  sp.with_t = false;
  sp.stale_from = 150;
  sp.stale_rank = 1;
  auto f = run_finding(kCause, sp, Order::round_robin, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 150);
  EXPECT_EQ(f->detected_step, 151);
}

TEST(RunNotAliveDetector, SameFindingWhateverTheInterleaving) {
  for (int world : {2, 4}) {
    Spec sp;
    sp.world = world;
    sp.hang_at = 90;
    sp.hang_rank = world - 1;
    auto rs = generate(sp);
    auto ref = run_detector(kCause, interleave(rs, Order::by_time), world)->finding();
    ASSERT_TRUE(ref);
    EXPECT_EQ(ref->detected_step, 90);
    for (auto o : {Order::round_robin, Order::rank_first, Order::reversed, Order::chunked}) {
      auto f = run_detector(kCause, interleave(rs, o), world)->finding();
      ASSERT_TRUE(f) << static_cast<int>(o);
      EXPECT_TRUE(same_finding(*ref, *f)) << static_cast<int>(o) << ": " << f->detected_t << " vs " << ref->detected_t
                                          << "\n" << f->evidence[0] << "\n" << ref->evidence[0];
    }
    // Without world_size the ranks seen so far are waited for: any order that shows every rank early.
    for (auto o : {Order::round_robin, Order::reversed, Order::chunked}) {
      auto f = run_detector(kCause, interleave(rs, o), 0)->finding();
      ASSERT_TRUE(f);
      EXPECT_TRUE(same_finding(*ref, *f)) << static_cast<int>(o);
    }
  }
}

// --- blocks in lockstep: the per-rank columns (detectors/rank_clock.h) against the same records one by one

// The fleet simulator's layout by hand: a step of `world` ranks is one block, each rank's heartbeats
// (every kBeat s from its last, folded into runs by StepBlock::append) before its step row.
struct Lockstep {
  static constexpr double kBeat = 0.1, kStep = 0.3;
  int world;
  std::vector<std::vector<Record>> blocks;  // one per step, in stream order
  std::vector<double> next_beat;            // per rank: the watchdog's next beat time
  explicit Lockstep(int w) : world(w), next_beat(static_cast<size_t>(w), 0.05) {}
  static Record beat(int rank, double t, const char* phase) {
    Record r;
    r.kind = RecordKind::heartbeat;
    r.rank = rank;
    r.t = t;
    r.phase = phase;
    return r;
  }
  // Rank r's beats before `until` (phase `phase`), onto `out`.
  void beats(std::vector<Record>& out, int r, double until, const char* phase) {
    double& t = next_beat[static_cast<size_t>(r)];
    for (; t < until; t += kBeat) out.push_back(beat(r, t, phase));
  }
  // Step s at t0 + s x kStep: every rank of `stepping` beats and logs it; the others write nothing.
  void step(int64_t s, const std::vector<int>& stepping) {
    std::vector<Record> b;
    const double t = 1.0 + static_cast<double>(s) * kStep;
    for (int r : stepping) {
      beats(b, r, t, "compute");
      Record row;
      row.kind = RecordKind::step;
      row.rank = r;
      row.step = s;
      row.t = t + 0.001 * r;
      row.opt_step = s;
      b.push_back(row);
    }
    blocks.push_back(std::move(b));
  }
  // Heartbeats only until `until`, of the ranks in `beating` (phase `phase`): one run per rank.
  void wait(double until, const std::vector<int>& beating, const char* phase) {
    std::vector<Record> b;
    for (int r : beating) beats(b, r, until, phase);
    blocks.push_back(std::move(b));
  }
  // The detector fed block by block (observe_block) or record by record (observe), finished at t_end.
  std::unique_ptr<Detector> run(bool as_blocks, double t_end) const {
    DetectorConfig cfg;
    cfg.world_size = world;
    auto d = make_detector(kCause, cfg);
    for (const auto& b : blocks) {
      if (as_blocks) d->observe_block(b.data(), b.size());
      else for (const auto& r : b) d->observe(r);
    }
    d->finish(t_end);
    return d;
  }
};

std::vector<int> ranks(int world, int except = -1) {
  std::vector<int> out;
  for (int r = 0; r < world; ++r)
    if (r != except) out.push_back(r);
  return out;
}

using detail::secs;

TEST(RunNotAliveDetector, BlocksInLockstepFindAHangCrossedInsideAFoldedRunAndTheRankThatStoppedInOne) {
  // 4 ranks step every 0.3 s with 3 heartbeats a step; at step 60 rank 2 stops in the middle of its run
  // of heartbeats (two beats of three, then nothing); the others wait in the collective, their heartbeats
  // folded into one run of 60 per rank: the 2 s deadline is crossed inside it, before rank 2's silence
  // bound (2 s after its last beat). Rank 2 never passes the hang's t: it is committed at the end.
  Lockstep f(4);
  for (int64_t s = 1; s < 60; ++s) f.step(s, ranks(4));
  const double last_step_t0 = f.blocks.back()[3].t;  // rank 0's step 59 (after its 3 beats)
  ASSERT_EQ(f.blocks.back()[3].rank, 0);
  std::vector<Record> cut;
  f.beats(cut, 2, f.next_beat[2] + 1.5 * Lockstep::kBeat, "compute");  // rank 2: two beats of three, then nothing
  ASSERT_EQ(cut.size(), 2u);
  const double rank2_last = cut.back().t;
  f.blocks.push_back(cut);
  f.wait(1.0 + 60 * Lockstep::kStep + 6.0, ranks(4, 2), "collective");
  // rank 0's heartbeat that crosses max(2 s, 3 x 0.3 s + 0.1 s) after its last step
  double expect_t = std::nan("");
  for (const Record& r : f.blocks.back())
    if (r.rank == 0 && r.t > last_step_t0 + run_not_alive::kMinStallS) {
      expect_t = r.t;
      break;
    }
  ASSERT_TRUE(std::isfinite(expect_t));
  const double t_end = 30.0;
  auto by_record = f.run(false, t_end), by_block = f.run(true, t_end);
  auto a = by_record->finding(), b = by_block->finding();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_TRUE(same_finding(*a, *b)) << a->evidence[0] << "\n" << b->evidence[0];
  EXPECT_EQ(b->detected_step, 60);
  EXPECT_EQ(b->rank, -1);
  EXPECT_EQ(b->detected_t, expect_t);
  EXPECT_NE(b->evidence[0].find("after step 59 (median step 0.30 s); heartbeats continue; ranks 0,1,3 phase=collective; "
                                "rank 2 silent since t=" + secs(rank2_last)),
            std::string::npos)
      << b->evidence[0];
  EXPECT_EQ(by_record->check().detail, by_block->check().detail);
}

TEST(RunNotAliveDetector, BlocksInLockstepJudgeARankThatRejoinsAsItsRecordsDo) {
  // 3 ranks; rank 1's process is gone for 5 s (no heartbeat: gap > max(2 s, 4 intervals), a new process)
  // while the others pause in a checkpoint; then every rank steps again, rank 1 re-emitting from step 35.
  Lockstep f(3);
  for (int64_t s = 1; s < 40; ++s) f.step(s, ranks(3));
  const double pause_end = 1.0 + 40 * Lockstep::kStep + 5.0;
  f.wait(pause_end, ranks(3, 1), "checkpoint");
  f.next_beat[1] = pause_end - 0.05;
  std::vector<Record> rejoin;
  for (int64_t s = 35; s < 60; ++s) {
    const int64_t others = s + 5;
    std::vector<Record> b;
    const double t = pause_end + static_cast<double>(s - 34) * Lockstep::kStep;
    for (int r = 0; r < 3; ++r) {
      f.beats(b, r, t, "compute");
      Record row;
      row.kind = RecordKind::step;
      row.rank = r;
      row.step = r == 1 ? s : others;
      row.t = t + 0.001 * r;
      b.push_back(row);
    }
    f.blocks.push_back(std::move(b));
  }
  const double t_end = pause_end + 26 * Lockstep::kStep;
  auto by_record = f.run(false, t_end), by_block = f.run(true, t_end);
  EXPECT_FALSE(by_record->finding());
  EXPECT_FALSE(by_block->finding());
  const CheckResult a = by_record->check(), b = by_block->check();
  EXPECT_EQ(a.detail, b.detail);
  EXPECT_EQ(b.state, CheckState::pass);
  EXPECT_EQ(b.detail.rfind("steps advancing: rank 0 last step 64 at t=" + secs(pause_end + 25 * Lockstep::kStep) +
                               " (median step 0.30 s); heartbeats every 0.10 s",
                           0),
            0u)
      << b.detail;
}

TEST(RunNotAliveDetector, BlocksInLockstepFindStaleLoggingAsItsRecordsDo) {
  // From step 30 rank 1 logs step 29 again while t and opt_step advance: the third such row fires.
  Lockstep f(2);
  for (int64_t s = 1; s < 40; ++s) {
    f.step(s, ranks(2));
    if (s >= 30) f.blocks.back().back().step = 29;
  }
  auto by_record = f.run(false, 20.0), by_block = f.run(true, 20.0);
  auto a = by_record->finding(), b = by_block->finding();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_TRUE(same_finding(*a, *b)) << a->evidence[0] << "\n" << b->evidence[0];
  EXPECT_EQ(b->onset_step, 30);
  EXPECT_EQ(b->detected_step, 31);
  EXPECT_EQ(b->detected_t, 1.0 + 31 * Lockstep::kStep + 0.001);
  EXPECT_NE(b->evidence[0].find("step 29 logged 3 times in a row by rank 1 over 0.60 s of wall clock while opt_step "
                                "advanced 29 -> 31"),
            std::string::npos)
      << b->evidence[0];
}

TEST(RunNotAliveDetector, OddDataDoesNotThrow) {
  auto d = make_detector(kCause, {});
  Record r;
  for (int i = 0; i < 50; ++i) {
    r.kind = static_cast<RecordKind>(i % 4);
    r.rank = i % 7 == 3 ? -1 : i % 3;
    r.step = i % 5 == 0 ? 7 : i;
    r.t = i % 6 == 0 ? std::nan("") : (i % 11 == 0 ? -5.0 : 100.0 - i);
    r.phase = i % 2 ? "checkpoint" : "weird";
    r.name = i % 3 ? "error" : "eval_end";
    EXPECT_NO_THROW(d->observe(r));
  }
  EXPECT_NO_THROW(d->finish(std::nan("")));
  EXPECT_NO_THROW(d->check());
}

}  // namespace
}  // namespace flatline::testing
