// Follower (readers/follow.h): a log followed as it is written gives, poll by poll, the records a
// whole-file read gives, whether it is appended (Megatron, DeepSpeed, JSONL), rewritten (HF
// trainer_state.json), grown in binary frames (TensorBoard, W&B), rotated or truncated, or appears
// in a directory later; a half-written line waits for its newline.
#include <gtest/gtest.h>

#include <filesystem>

#include "readers/follow.h"
#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {
namespace fs = std::filesystem;

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write(const std::string& p, const std::string& s, bool append = false) {
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream(p, std::ios::binary | (append ? std::ios::app : std::ios::trunc)) << s;
}
std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("flatline-follow-" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}
std::vector<std::string> steps_of(const std::vector<Record>& v) {
  std::vector<std::string> out;
  for (const auto& r : v) out.push_back(std::string(to_string(r.kind)) + " " + std::to_string(r.step) + " " +
                                        std::to_string(r.rank));
  return out;
}
Diagnosis triage_of(const std::vector<Record>& v, const LogFacts& facts = {}) {
  DetectorConfig cfg;
  cfg.planned_steps = facts.planned_steps;
  Triage t(cfg);
  for (const auto& r : v) t.observe(r);
  t.finish(0);
  return t.diagnosis();
}

TEST(Follow, AppendedTextLogInPiecesGivesTheWholeFilesRecords) {
  const std::string whole = read_all(logs("megatron/lr_zero.log"));
  const std::string p = fresh_dir("append") + "/train.log";
  Follower f(p);
  std::vector<Record> got;
  EXPECT_EQ(f.poll(got), 0u);  // not there yet: said once
  EXPECT_EQ(f.take_warnings(), Warnings{p + ": no such file or directory; waiting for it"});
  EXPECT_EQ(f.poll(got), 0u);
  EXPECT_TRUE(f.take_warnings().empty());
  // Written in 7 pieces that cut lines anywhere.
  const size_t piece = whole.size() / 7 + 1;
  for (size_t at = 0; at < whole.size(); at += piece) {
    write(p, whole.substr(at, piece), at > 0);
    f.poll(got);
  }
  f.finish(got);
  EXPECT_EQ(f.format(), "megatron");
  LogData ref = read_log(logs("megatron/lr_zero.log"));
  EXPECT_EQ(steps_of(got), steps_of(ref.records));
  EXPECT_EQ(triage_of(got).cause, "lr_zero");
  EXPECT_TRUE(f.take_warnings().empty());
}

TEST(Follow, HalfWrittenLineWaitsForItsNewline) {
  const std::string p = fresh_dir("half") + "/ds.log";
  Follower f(p);
  std::vector<Record> got;
  write(p, "step=10, skipped=0, lr=[0.1]\nstep=20, skipped=0, lr=[0.");
  f.poll(got);
  f.poll(got);  // quiet: step 10's record, held for lines that usually follow at once, comes out
  ASSERT_EQ(got.size(), 1u);
  write(p, "1]\n", true);
  f.poll(got);
  f.poll(got);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_DOUBLE_EQ(*got[1].lr, 0.1);
}

TEST(Follow, RotationAndTruncationReadThePathAgain) {
  const std::string d = fresh_dir("rotate"), p = d + "/train.log";
  Follower f(p);
  std::vector<Record> got;
  write(p, "step=10, skipped=0, lr=[0.1]\nstep=20, skipped=0, lr=[0.1]\n");
  f.poll(got);
  fs::rename(p, d + "/train.log.1");  // logrotate: moved aside, a new file created
  write(p, "step=30, skipped=0, lr=[0.1]\n");
  f.poll(got);
  f.poll(got);
  write(p, "step=40, skipped=0, lr=[1]\n");  // copytruncate: the same file, shorter than what was read
  f.poll(got);
  f.poll(got);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[2].step, 30);
  EXPECT_EQ(got[3].step, 40);
  const auto w = f.take_warnings();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], p + ": rotated or truncated; reading it again from its start");
}

TEST(Follow, RewrittenTrainerStateHandsOutEachEntryOnce) {
  // The Trainer rewrites trainer_state.json at each save, with the whole history.
  const std::string whole = read_all(logs("hf/lr_zero/trainer_state.json"));
  LogData ref = read_log(logs("hf/lr_zero/trainer_state.json"));
  const std::string d = fresh_dir("hf"), p = d + "/trainer_state.json";
  Follower f(d);
  std::vector<Record> got;
  // Two saves: the file cut after ~1/3 and ~2/3 of its log_history (a valid JSON prefix each time).
  for (double frac : {0.33, 0.66}) {
    std::string part = whole.substr(0, static_cast<size_t>(frac * static_cast<double>(whole.size())));
    part = part.substr(0, part.rfind("},") + 1) + "\n  ],\n  \"max_steps\": 600\n}\n";
    write(p, part);
    f.poll(got);
  }
  write(p, whole);
  f.poll(got);
  const size_t before_quiet = got.size();
  f.poll(got);  // unchanged: the held newest step comes out
  EXPECT_GT(got.size(), before_quiet);
  EXPECT_EQ(steps_of(got), steps_of(ref.records));
  EXPECT_EQ(f.facts().planned_steps, 600);
  EXPECT_EQ(triage_of(got, f.facts()).cause, "lr_zero");
}

TEST(Follow, TensorBoardAndWandbGrowingInFrames) {
  for (const char* src : {"tensorboard/lr_zero/events.out.tfevents.1704110400.host.1.0",
                          "real/wandb-offline-schedule-too-short/wandb"}) {
    std::string file = logs(src);
    if (fs::is_directory(file))
      for (const auto& e : fs::recursive_directory_iterator(file))
        if (e.path().extension() == ".wandb") file = e.path().string();
    const std::string whole = read_all(file);
    const std::string d = fresh_dir(fs::path(file).extension() == ".wandb" ? "wb" : "tb");
    const std::string p = d + "/" + fs::path(file).filename().string();
    Follower f(d);
    std::vector<Record> got;
    for (size_t at = 0; at < whole.size(); at += 4096) {  // cut inside frames
      write(p, whole.substr(0, std::min(whole.size(), at + 4096)));
      f.poll(got);
    }
    f.finish(got);
    LogData ref = read_log(file);
    EXPECT_EQ(steps_of(got), steps_of(ref.records)) << src;
    EXPECT_EQ(triage_of(got).cause, "lr_zero") << src;
  }
}

TEST(Follow, RankFilesAppearingLater) {
  const std::string d = fresh_dir("ranks");
  Follower f(d);
  std::vector<Record> got;
  const std::string r0 = read_all(logs("flatline/zero_grad_rank/telemetry/rank-0.jsonl"));
  const std::string r1 = read_all(logs("flatline/zero_grad_rank/telemetry/rank-1.jsonl"));
  write(d + "/telemetry/rank-0.jsonl", r0.substr(0, r0.size() / 2));
  f.poll(got);
  write(d + "/telemetry/rank-1.jsonl", r1);
  write(d + "/telemetry/rank-0.jsonl", r0.substr(r0.size() / 2), true);
  f.poll(got);
  f.finish(got);
  EXPECT_EQ(f.files().size(), 2u);
  EXPECT_EQ(f.world_size(), 2);
  EXPECT_EQ(got.size(), read_log(logs("flatline/zero_grad_rank")).records.size());
  Triage t(DetectorConfig{2});
  for (const auto& r : got) t.observe(r);
  t.finish(0);
  EXPECT_EQ(t.diagnosis().cause, "zero_grad_rank");
  EXPECT_EQ(t.diagnosis().rank, 1);
}

}  // namespace
}  // namespace flatline::testing
