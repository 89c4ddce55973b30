// data_replay: silent at the start of a run, on healthy noise, on a restart that re-runs steps with
// the same batches, and on isolated repeats; fires when a resumed loader starts its epoch over and
// when the loader cycles a small window; at fleet scale, when it starts over long after the history
// forgot its first batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr const char* kCause = "data_replay";

Spec resume_drops_sampler_state() {
  Spec sp;
  sp.steps = 400;
  sp.checkpoint_at = {300};
  sp.restart_after = 350;
  sp.restart_from = 300;
  // the resumed loader starts its epoch over: step 301 gets the batch of step 1
  sp.batch_index = [](int64_t step, bool after_restart) { return after_restart ? step - 301 : step - 1; };
  return sp;
}

// --- 1. warm-up ----------------------------------------------------------------------------------
TEST(DataReplayDetector, SilentAtTheStartOfARun) {
  Spec sp;
  sp.steps = 12;
  sp.checkpoint_at = {5};
  sp.restart_after = 8;  // restarted early: steps 6..8 re-run with their own batches
  sp.restart_from = 5;
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::pass);
}

// --- 2. healthy noise and look-alikes -------------------------------------------------------------
TEST(DataReplayDetector, SilentOnHealthyNoise) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Spec sp;
    sp.seed = seed;
    auto d = run_detector(kCause, interleave(generate(sp), Order::chunked, seed), 2);
    EXPECT_FALSE(d->finding()) << "seed " << seed;
    EXPECT_EQ(d->check().detail, "600 distinct batches hashed, 0 isolated repeat(s), no replay");
  }
}

// Logs from elsewhere may fingerprint a batch by a small integer (its first sample id): distinct
// small values must stay distinct batches, and a real repeat of one must still be found.
TEST(DataReplayDetector, SmallIntegerHashesAreDistinctBatches) {
  Spec sp;
  sp.mutate = [](Record& r) { r.batch_hash = static_cast<uint64_t>(r.step * 2 + r.rank); };
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding()) << d->finding()->evidence[0];
  sp.mutate = [](Record& r) { r.batch_hash = static_cast<uint64_t>((r.step >= 200 ? r.step - 150 : r.step) * 2 + r.rank); };
  auto f = run_detector(kCause, interleave(generate(sp), Order::by_time), 2)->finding();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 200);
  EXPECT_EQ(f->detected_step, 201);
}

TEST(DataReplayDetector, SilentOnRestartReemittingSteps) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.steps = 400;
    sp.checkpoint_at = {300};
    sp.restart_after = 350;  // steps 301..350 appear twice, with the same batches
    sp.restart_from = 300;
    auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
    EXPECT_FALSE(d->finding()) << "seed " << seed;
    EXPECT_EQ(d->check().state, CheckState::pass);
  }
}

TEST(DataReplayDetector, SilentOnIsolatedRepeats) {
  Spec sp;
  // one batch re-used at 100, another at 150 and 153 (two repeats, but not within 3 records)
  sp.batch_index = [](int64_t step, bool) -> int64_t {
    if (step == 100) return 10;
    if (step == 150) return 20;
    if (step == 153) return 30;
    return step - 1;
  };
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().detail, "594 distinct batches hashed, 6 isolated repeat(s), no replay");
}

// --- 3. injected faults ---------------------------------------------------------------------------
TEST(DataReplayDetector, FiresWhenResumeDropsSamplerState) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Spec sp = resume_drops_sampler_state();
    sp.seed = seed;
    auto f = run_finding(kCause, sp);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->onset_step, 301);
    EXPECT_EQ(f->detected_step, 302);
    EXPECT_EQ(f->rank, -1);
    EXPECT_NE(f->evidence[0].find("batch of step 302 identical to step 2 (hash "), std::string::npos);
    EXPECT_NE(f->evidence[0].find("); 2 of the last 2 batches replayed"), std::string::npos) << f->evidence[0];
  }
}

TEST(DataReplayDetector, FiresOnCycleWindow) {
  Spec sp;
  // from step 200 the loader repeats the same 4 batches: 200..203 are new, 204 = 200, 205 = 201
  sp.batch_index = [](int64_t step, bool) { return step < 200 ? step - 1 : 199 + (step - 200) % 4; };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 204);
  EXPECT_EQ(f->detected_step, 205);
  EXPECT_NE(f->evidence[0].find("batch of step 205 identical to step 201"), std::string::npos) << f->evidence[0];
}

TEST(DataReplayDetector, FiresOnTwoRepeatsInThreeRecords) {
  Spec sp;
  sp.batch_index = [](int64_t step, bool) -> int64_t { return step == 120 || step == 122 ? step - 100 : step - 1; };
  auto f = run_finding(kCause, sp);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 120);
  EXPECT_EQ(f->detected_step, 122);
  EXPECT_NE(f->evidence[0].find("2 of the last 3 batches replayed"), std::string::npos) << f->evidence[0];
}

TEST(DataReplayDetector, CannotRunWithoutBatchHash) {
  Spec sp;
  sp.batch_hash = false;
  auto d = run_detector(kCause, interleave(generate(sp), Order::by_time), 2);
  EXPECT_FALSE(d->finding());
  EXPECT_EQ(d->check().state, CheckState::cannot_run);
  EXPECT_EQ(d->check().detail, "missing batch_hash: log a hash of each batch's sample ids");
}

TEST(DataReplayDetector, SameFindingWhateverTheInterleaving) {
  auto rs = generate(resume_drops_sampler_state());
  expect_same_finding_whatever_the_interleaving(kCause, rs);
}

TEST(DataReplayDetector, OnlyOneRankReplaying) {
  auto rs = generate(Spec{});
  // from step 250 rank 1's loader (only) replays the batches of its steps 1, 2, ...
  std::map<int64_t, uint64_t> early;
  for (const auto& r : rs[1])
    if (r.kind == RecordKind::step && r.step < 250) early[r.step] = *r.batch_hash;
  for (auto& r : rs[1])
    if (r.kind == RecordKind::step && r.step >= 250) r.batch_hash = early[r.step - 249];
  for (auto o : {Order::by_time, Order::rank_first, Order::reversed}) {
    auto f = run_detector(kCause, interleave(rs, o), 2)->finding();
    ASSERT_TRUE(f);
    EXPECT_EQ(f->onset_step, 250);
    EXPECT_EQ(f->detected_step, 251);
    EXPECT_NE(f->evidence[1].find("rank 1: first replayed batch at step 250 (seen at step 1)"), std::string::npos)
        << f->evidence[1];
  }
}

// Blocks of a step's rows in rank order (the fleet simulator's: a pass with its tables asked of memory
// rows ahead): each row is judged on its own rank's batch, whichever rank of the 16 replays.
TEST(DataReplayDetector, OneRankOfABlockReplayingIsJudgedOnItsOwnBatches) {
  Spec sp;
  sp.world = 16;
  sp.heartbeats = false;
  auto rs = generate(sp);
  std::map<int64_t, uint64_t> early;
  for (const auto& r : rs[3])
    if (r.kind == RecordKind::step && r.step < 250) early[r.step] = *r.batch_hash;
  for (auto& r : rs[3])
    if (r.kind == RecordKind::step && r.step >= 250) r.batch_hash = early[r.step - 249];
  const auto recs = interleave(rs, Order::round_robin);  // the k-th record of every rank, then the next
  DetectorConfig cfg;
  cfg.world_size = 16;
  auto d = make_detector(kCause, cfg);
  for (size_t at = 0; at < recs.size(); at += 16) d->observe_block(recs.data() + at, std::min<size_t>(16, recs.size() - at));
  d->finish(recs.back().t + 1);
  auto f = d->finding();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 250);
  EXPECT_EQ(f->detected_step, 251);
  EXPECT_NE(f->evidence[1].find("rank 3: first replayed batch at step 250 (seen at step 1)"), std::string::npos)
      << f->evidence[1];
}

TEST(DataReplayDetector, OddDataDoesNotThrow) {
  auto d = make_detector(kCause, {});
  Record r;
  for (int i = 0; i < 40; ++i) {
    r.rank = i % 3 - 1;
    r.step = i % 4 ? i : 3;
    if (i % 5) r.batch_hash = static_cast<uint64_t>(i % 6);
    else r.batch_hash.reset();
    EXPECT_NO_THROW(d->observe(r));
  }
  EXPECT_NO_THROW(d->check());
}

// At fleet scale the history holds 1024 batches a rank (1024 ranks): a loader that starts over long
// after its first batches were forgotten still replays the anchors, the first batches of the run and of
// each epoch. One rank of 1024; epochs of `epoch_len` steps; a restart at `resume_at` + 200 resumes from
// the checkpoint of `resume_at`, and the loader goes on from `replay_from` (itself when healthy).
std::vector<Record> long_run(int64_t epoch_len, int64_t resume_at, int64_t replay_from) {
  std::vector<Record> out;
  auto step_record = [&](int64_t step, int64_t batch) {
    Record r;
    r.step = step;
    r.t = static_cast<double>(out.size());
    r.epoch = (batch - 1) / epoch_len;
    r.batch_hash = mix64(static_cast<uint64_t>(batch));
    out.push_back(r);
  };
  for (int64_t s = 1; s <= resume_at + 200; ++s) step_record(s, s);
  Record e;
  e.kind = RecordKind::event;
  e.name = "resume";
  e.step = resume_at;
  e.t = static_cast<double>(out.size());
  out.push_back(e);
  for (int64_t s = resume_at + 1; s <= resume_at + 300; ++s) step_record(s, replay_from + (s - resume_at - 1));
  return out;
}

TEST(DataReplayDetector, AReplayOfBatchesLongForgottenIsFoundByTheAnchors) {
  // epoch 0 from its first batch, 40,000 steps on
  auto f = run_detector(kCause, long_run(1000, 40000, 1), 1024)->finding();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 40001);
  EXPECT_EQ(f->detected_step, 40002);
  EXPECT_EQ(f->evidence[1], "rank 0: first replayed batch at step 40001 (seen at step 1)");
  // the current epoch from its start, 1,900 steps in (the history keeps 1,024)
  f = run_detector(kCause, long_run(2000, 3900, 2001), 1024)->finding();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->onset_step, 3901);
  EXPECT_EQ(f->evidence[1], "rank 0: first replayed batch at step 3901 (seen at step 2001)");
  // the healthy twin: the restart re-runs steps 40001.. with their own batches
  auto d = run_detector(kCause, long_run(1000, 40000, 40001), 1024);
  EXPECT_FALSE(d->finding()) << d->finding()->evidence[0];
  EXPECT_EQ(d->check().state, CheckState::pass);
}

}  // namespace
}  // namespace flatline::testing
