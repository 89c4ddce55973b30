// Data-parallel training, determinism and resume: real ranks over c10d Gloo, exact values.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/protocol.h"
#include "tests/sim/ranks.h"

namespace flatline::test {

// Two ranks on batches B each give the same parameters as one rank on their union (2B): the gradient
// all-reduce averages per-rank means, which is the mean over the union. SGD keeps the comparison
// linear (Adam's first step is sign-like and amplifies float noise); tolerance: float32 accumulation
// order differs between 1 and 2 ranks, 1e-6 absolute on parameters of size ~0.02-1.
TEST(DataParallel, TwoRanksEqualOneRankOnTheUnionOfBatches) {
  Scenario two = tiny_gpt(2, 3);
  two.optimizer.kind = "sgd";
  two.optimizer.lr = 0.5;
  two.schedule.kind = "constant";
  two.schedule.warmup = 0;
  Scenario one = two;
  one.world_size = 1;
  one.batch_size = 2 * two.batch_size;
  auto r2 = run_ranks(two, temp_dir("dp2"));
  auto r1 = run_ranks(one, temp_dir("dp1"));
  ASSERT_EQ(r2[0].params.size(), r1[0].params.size());
  double max_diff = 0, max_moved = 0;
  Scenario init = one;
  init.steps = 0;
  for (size_t i = 0; i < r1[0].params.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(r2[0].params[i] - r1[0].params[i])));
  auto r0 = run_ranks([&] { Scenario s = one; s.steps = 1; s.optimizer.lr = 0; return s; }(), temp_dir("dp0"));
  for (size_t i = 0; i < r1[0].params.size(); ++i)
    max_moved = std::max(max_moved, static_cast<double>(std::fabs(r1[0].params[i] - r0[0].params[i])));
  EXPECT_LT(max_diff, 1e-6);
  EXPECT_GT(max_moved, 1e-3);  // training moved the parameters far more than the tolerance
  EXPECT_EQ(r2[0].losses.size(), 3u);
}

TEST(DataParallel, ParametersIdenticalAcrossRanksAfterEveryStep) {
  auto r = run_ranks(tiny_gpt(2, 6), temp_dir("same"));
  EXPECT_EQ(r[0].param_mismatches, 0);
  EXPECT_EQ(r[1].param_mismatches, 0);
  ASSERT_EQ(r[0].params.size(), r[1].params.size());
  for (size_t i = 0; i < r[0].params.size(); ++i) ASSERT_EQ(r[0].params[i], r[1].params[i]) << "element " << i;
  EXPECT_NE(r[0].losses, r[1].losses);  // each rank trained on its own shard
}

TEST(Determinism, SameScenarioAndSeedGiveIdenticalTelemetry) {
  Scenario s = tiny_gpt(2, 8);
  s.eval_every = 4;
  const std::string a = temp_dir("det-a"), b = temp_dir("det-b");
  run_ranks(s, a);
  run_ranks(s, b);
  for (int rank = 0; rank < 2; ++rank) {
    auto ra = deterministic_steps(a, rank), rb = deterministic_steps(b, rank);
    ASSERT_EQ(ra.size(), 10u);  // 8 steps + 2 evals
    EXPECT_EQ(ra, rb);
  }
  Scenario other = s;
  other.seed = 12;
  const std::string c = temp_dir("det-c");
  run_ranks(other, c);
  EXPECT_NE(deterministic_steps(a, 0), deterministic_steps(c, 0));
}

// Stopping after step `restart_at` and resuming from the checkpoint before it re-runs the steps after
// that checkpoint with exactly the records of the uninterrupted run (model, AdamW moments, scheduler,
// sampler, fp16 scaler all restored), at every checkpoint of the run, in fp32 and in fp16.
class ResumeAt : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(ResumeAt, ResumedRunReproducesUninterruptedTelemetryBitExactly) {
  const auto [restart_at, precision] = GetParam();
  Scenario s = tiny_gpt(2, 10);
  s.checkpoint_every = 2;
  s.precision = precision;
  const std::string full = temp_dir("full"), cut = temp_dir("cut");
  run_ranks(s, full);
  Scenario r = s;
  r.restart_at = restart_at;
  auto first = run_ranks(r, cut);
  EXPECT_TRUE(first[0].stopped_for_restart);
  EXPECT_EQ(first[0].last_step, restart_at);
  run_ranks(r, cut, /*resume=*/true);
  const int ck = restart_at / 2 * 2;
  for (int rank = 0; rank < 2; ++rank) {
    auto a = deterministic_steps(full, rank), b = deterministic_steps(cut, rank);
    ASSERT_EQ(a.size(), 10u);
    ASSERT_EQ(b.size(), static_cast<size_t>(restart_at + 10 - ck));  // 1..restart_at, then ck+1..10
    EXPECT_EQ(std::vector<std::string>(b.begin(), b.begin() + restart_at),
              std::vector<std::string>(a.begin(), a.begin() + restart_at));
    EXPECT_EQ(std::vector<std::string>(b.begin() + restart_at, b.end()), std::vector<std::string>(a.begin() + ck, a.end()));
  }
}

// Resuming under a scenario whose model or optimizer differs from the checkpoint's is refused with an
// error naming the checkpoint and the difference (LibTorch's loader alone would take the saved tensors
// whatever their shapes, or give one layer's Adam moments to another layer of the same shape).
TEST(Resume, RefusesACheckpointOfAnotherModelOrOptimizer) {
  Scenario s = tiny_gpt(1, 4);
  s.checkpoint_every = 2;
  const std::string dir = temp_dir("mismatch");
  run_ranks(s, dir);
  auto resume_error = [&](const Scenario& changed) {
    RankOptions o;
    o.scenario = changed;
    o.run_dir = dir;
    o.threads = 1;
    o.resume = true;
    o.run_t0 = 1.0;
    o.master_port = test_port();
    try {
      train_rank(o);
    } catch (const RankError& e) {
      return std::string(e.what());
    }
    return std::string("(resumed)");
  };
  const std::string file = dir + "/checkpoints/step-00000004/rank-0.pt";
  Scenario wider = s;
  wider.model.n_embd = 16;
  EXPECT_EQ(resume_error(wider),
            file + ": the checkpoint was written by a different model (16 parameter tensors, this scenario's has "
                   "16); first difference: checkpoint 'model gpt n_layer 1 n_head 2 n_embd 32 block_size 32 "
                   "tied_head true channels 16 hidden 64', scenario 'model gpt n_layer 1 n_head 2 n_embd 16 "
                   "block_size 32 tied_head true channels 16 hidden 64'");
  Scenario more_heads = s;  // every parameter keeps its shape: only the spec tells
  more_heads.model.n_head = 4;
  EXPECT_NE(resume_error(more_heads).find("scenario 'model gpt n_layer 1 n_head 4 n_embd 32"), std::string::npos);
  Scenario sgd = s;
  sgd.optimizer.kind = "sgd";
  EXPECT_EQ(resume_error(sgd), file + ": optimizer state is for 'adamw', this run's optimizer is 'sgd'");
  EXPECT_EQ(resume_error(s), "(resumed)");  // the same scenario still resumes
}

// A resume under another launcher (no run origin given, as `flatline worker --resume`) continues the
// run's clock from the origin the first start recorded: t does not restart at 0.
TEST(Resume, WithoutAGivenOriginContinuesTheRunsClock) {
  Scenario s = tiny_gpt(1, 6);
  s.checkpoint_every = 2;
  s.restart_at = 4;
  const std::string dir = temp_dir("origin");
  auto launch = [&](bool resume) {
    RankOptions o;
    o.scenario = s;
    o.run_dir = dir;
    o.threads = 1;
    o.resume = resume;
    o.run_t0 = 0;  // not given
    o.master_port = test_port();
    train_rank(o);
  };
  launch(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  launch(true);
  double last_before = -1, first_after = -1;
  bool resumed = false;
  for (const auto& r : read_jsonl(dir + "/telemetry/rank-0.jsonl", nullptr)) {
    if (r.kind == RecordKind::event && r.name == "resume") resumed = true;
    if (r.kind != RecordKind::step) continue;
    if (!resumed) last_before = r.t;
    else if (first_after < 0) first_after = r.t;
  }
  ASSERT_TRUE(resumed);
  ASSERT_GT(last_before, 0);
  EXPECT_GT(first_after, last_before + 0.4);  // the pause between the launches is on the run's clock
}

// A resume under another world size: 2 ranks' checkpoint continued by 1 rank re-shards the sampler, so
// no sample is trained twice (it used to replay: diagnose said data_replay on a healthy run); 3 ranks,
// whose global batch does not divide what was consumed, are refused naming the checkpoint and the fix.
TEST(Resume, AnotherWorldSizeReShardsTheSamplerExactlyOrIsRefused) {
  Scenario s = tiny_gpt(2, 10);
  s.checkpoint_every = 10;
  const std::string dir = temp_dir("reshard");
  run_ranks(s, dir, false, false);
  std::set<uint64_t> before;
  for (int r = 0; r < 2; ++r)
    for (const auto& rec : read_jsonl(dir + "/telemetry/rank-" + std::to_string(r) + ".jsonl", nullptr))
      if (rec.kind == RecordKind::step) before.insert(*rec.batch_hash);
  auto resume = [&](const std::string& in, int world, int64_t steps, std::vector<std::string>* errors) {
    Scenario t = s;
    t.world_size = world;
    t.steps = steps;
    run_ranks(t, in, /*resume=*/true, false, errors);
  };
  // 2 -> 1: 10 global batches of 8 samples = 20 of 4
  resume(dir, 1, 30, nullptr);
  int64_t after = 0, samples = -1;
  std::string detail;
  for (const auto& rec : read_jsonl(dir + "/telemetry/rank-0.jsonl", nullptr)) {
    if (rec.kind == RecordKind::event && rec.name == "resume") detail = rec.detail;
    if (rec.kind != RecordKind::step || rec.step <= 10) continue;
    ++after;
    EXPECT_EQ(before.count(*rec.batch_hash), 0u) << "step " << rec.step << " trains a batch already trained";
    samples = *rec.samples_seen;
  }
  EXPECT_EQ(after, 20);
  EXPECT_EQ(samples, 40 + 20 * 4);  // rank 0's 10 x 4 before, 20 x 4 after
  EXPECT_EQ(detail, "from checkpoint step 10, re-sharded from 2 to 1 ranks");
  // 2 -> 3: 80 samples consumed, 3 ranks take 12 a step
  const std::string dir3 = temp_dir("reshard3");
  run_ranks(s, dir3, false, false);
  std::vector<std::string> errors;
  resume(dir3, 3, 20, &errors);
  ASSERT_EQ(errors.size(), 3u);
  for (const auto& e : errors)
    EXPECT_EQ(e, dir3 + "/checkpoints/step-00000010: written by 2 ranks; 3 ranks cannot continue its sampler without "
                        "replaying or skipping data (10 global batches of 8 samples into epoch 0 is not a whole number "
                        "of global batches of 12): resume with WORLD_SIZE=2");
}

// Resume errors name the file: a checkpoint that is not a zip archive (LibTorch says only "failed
// finding central directory"), and a `step-latest` link next to the checkpoints is not one of them.
TEST(Resume, ErrorsNameTheCheckpointFileAndStrayNamesAreIgnored) {
  Scenario s = tiny_gpt(1, 4);
  s.checkpoint_every = 2;
  const std::string dir = temp_dir("corrupt");
  run_ranks(s, dir);
  std::filesystem::create_directory_symlink(dir + "/checkpoints/step-00000004", dir + "/checkpoints/step-latest");
  Scenario longer = s;
  longer.steps = 6;
  run_ranks(longer, dir, /*resume=*/true);  // the link is skipped, not parsed as a step ("stoll")
  std::ofstream(dir + "/checkpoints/step-00000006/rank-0.pt", std::ios::trunc) << "not a checkpoint";
  std::vector<std::string> errors;
  run_ranks(longer, dir, /*resume=*/true, true, &errors);
  const std::string file = dir + "/checkpoints/step-00000006/rank-0.pt";
  EXPECT_EQ(errors[0].rfind(file + ": not a readable checkpoint: ", 0), 0u) << errors[0];
}

INSTANTIATE_TEST_SUITE_P(EveryCheckpoint, ResumeAt,
                         ::testing::Combine(::testing::Values(3, 5, 7, 9), ::testing::Values("fp32", "fp16")));

}  // namespace flatline::test

namespace flatline::test {

// The error tiers (sim/trainer.h): the file system refusing the run directory is a RankError of kind
// io that names the path; a scenario asking more of its data than the data holds is a ScenarioError.
TEST(ErrorTiers, AnUnwritableRunDirIsAnIoRankError) {
  RankOptions o;
  o.scenario = tiny_gpt(1, 2);
  o.run_dir = "/proc/flatline-cannot-write-here";
  o.threads = 1;
  o.run_t0 = 1.0;
  try {
    train_rank(o);
    FAIL() << "trained";
  } catch (const RankError& e) {
    EXPECT_EQ(e.kind(), RankError::Kind::io);
    EXPECT_NE(std::string(e.what()).find("/proc/flatline-cannot-write-here"), std::string::npos) << e.what();
  }
}

TEST(ErrorTiers, ABatchLargerThanTheDatasetIsAScenarioError) {
  Scenario s = tiny_gpt(1, 2);
  s.data.kind = "fashion_mnist";
  s.model.kind = "cnn";
  s.batch_size = 70000;  // Fashion-MNIST has 60000 training images
  RankOptions o;
  o.scenario = s;
  o.run_dir = temp_dir("too-big");
  o.threads = 1;
  o.run_t0 = 1.0;
  EXPECT_THROW(train_rank(o), ScenarioError);
  std::string events;
  for (const auto& r : read_jsonl(o.run_dir + "/telemetry/rank-0.jsonl", nullptr))
    if (r.kind == RecordKind::event && r.name == "error") events += r.detail;
  EXPECT_NE(events.find("smaller than one global batch"), std::string::npos) << events;
  EXPECT_EQ(events.find("internal error"), std::string::npos) << events;
}

// A checkpoint the launcher asks for near a finding (docs/DESIGN.md §8; core/protocol.h
// kCheckpointRequestSignal). Only rank 0 sees the request (at step 5), yet every rank writes the same
// step (they agree in the consistency all-reduce: on it with flatline's kernels, through the scalars read
// back a step later with aten's), under checkpoints/live-step-N. The run stays the run without it: the
// same step and eval records, the same events but for its checkpoint_save. The scenario's restart resumes
// from its own checkpoint (step 4), never from the live one (step 5 or 6).
class LiveCheckpoint : public ::testing::TestWithParam<const char*> {};

// The events of a rank as (name, step, detail), the run directory in a detail replaced by "RUN".
std::vector<std::string> events_of(const std::string& dir, int rank) {
  std::vector<std::string> out;
  for (const auto& r : read_jsonl(dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr)) {
    if (r.kind != RecordKind::event) continue;
    std::string detail = r.detail;
    for (size_t at; (at = detail.find(dir)) != std::string::npos;) detail.replace(at, dir.size(), "RUN");
    out.push_back(r.name + "@" + std::to_string(r.step) + " " + detail);
  }
  return out;
}

std::vector<std::string> live_checkpoints_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/checkpoints"))
    if (e.path().filename().string().rfind(kLiveCheckpointPrefix, 0) == 0) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST_P(LiveCheckpoint, OneRanksRequestIsEveryRanksAndTheRunStaysAsItWas) {
  Scenario s = tiny_gpt(2, 10);
  s.kernels = GetParam();
  s.checkpoint_every = 4;
  s.eval_every = 3;
  s.restart_at = 7;
  const std::string plain = temp_dir("live-plain"), asked = temp_dir("live-asked");
  run_ranks(s, plain);
  run_ranks(s, plain, /*resume=*/true);
  run_ranks(s, asked, false, true, nullptr, [](RankOptions& o) {
    o.checkpoint_requests = [rank = o.rank](int64_t step) { return rank == 0 && step >= 5 ? 1 : 0; };
  });
  run_ranks(s, asked, /*resume=*/true);

  const std::vector<std::string> live = live_checkpoints_in(asked);
  ASSERT_EQ(live.size(), 1u);
  const int64_t at = std::stoll(live[0].substr(std::string(kLiveCheckpointPrefix).size()));
  EXPECT_EQ(at, std::string(GetParam()) == "aten" ? 6 : 5);  // aten: agreed from step 5's scalars, at step 6
  const std::string ck = asked + "/checkpoints/" + live[0];
  for (const char* f : {"/rank-0.pt", "/rank-1.pt", "/COMPLETE"}) EXPECT_TRUE(std::filesystem::exists(ck + f)) << f;
  EXPECT_TRUE(live_checkpoints_in(plain).empty());
  const std::string saved = "checkpoint_save@" + std::to_string(at) + " RUN/checkpoints/" + live[0];
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(deterministic_steps(asked, rank), deterministic_steps(plain, rank)) << "rank " << rank;
    std::vector<std::string> ev = events_of(asked, rank), without;
    EXPECT_EQ(std::count(ev.begin(), ev.end(), saved), 1) << "rank " << rank;
    for (const auto& e : ev)
      if (e != saved) without.push_back(e);
    EXPECT_EQ(without, events_of(plain, rank)) << "rank " << rank;
    EXPECT_NE(std::find(ev.begin(), ev.end(), "resume@4 from checkpoint step 4"), ev.end()) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, LiveCheckpoint, ::testing::Values("flatline", "aten"));

// However often it is asked, a rank writes at most kMaxLiveCheckpoints live checkpoints.
TEST(LiveCheckpoint, ARankWritesAtMostTheBoundOfThem) {
  Scenario s = tiny_gpt(2, 8);
  const std::string dir = temp_dir("live-bound");
  run_ranks(s, dir, false, false, nullptr, [](RankOptions& o) {
    o.checkpoint_requests = [rank = o.rank](int64_t step) { return rank == 1 ? step : 0; };  // one more each step
  });
  std::vector<std::string> want;
  for (int k = 1; k <= kMaxLiveCheckpoints; ++k) want.push_back(fmt::format("{}{:08d}", kLiveCheckpointPrefix, k));
  EXPECT_EQ(live_checkpoints_in(dir), want);
}

}  // namespace flatline::test
