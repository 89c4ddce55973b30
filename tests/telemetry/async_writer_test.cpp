// The background record writer: order, draining, and a failed write reaching the posting thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "telemetry/async_writer.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace {

std::string temp_file(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "flatline-async-writer-test";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

Record step_record(int64_t step) {
  Record r;
  r.rank = 1;
  r.t = 0.5 * static_cast<double>(step);
  r.step = step;
  r.loss = 2.0;
  return r;
}

TEST(AsyncRecordWriter, WritesEveryRecordInPostedOrderByDrain) {
  const std::string path = temp_file("order.jsonl");
  JsonlWriter out(path);
  AsyncRecordWriter w(out);
  for (int64_t s = 1; s <= 2000; ++s) w.post(step_record(s));
  w.drain();
  std::vector<std::string> warnings;
  auto recs = read_jsonl(path, &warnings);
  ASSERT_EQ(recs.size(), 2000u);
  for (size_t i = 0; i < recs.size(); ++i) ASSERT_EQ(recs[i].step, static_cast<int64_t>(i + 1));
  EXPECT_TRUE(warnings.empty());
}

TEST(AsyncRecordWriter, DestructorWritesWhatIsStillQueued) {
  const std::string path = temp_file("destructor.jsonl");
  {
    JsonlWriter out(path);
    AsyncRecordWriter w(out);
    for (int64_t s = 1; s <= 300; ++s) w.post(step_record(s));
  }
  auto recs = read_jsonl(path, nullptr);
  ASSERT_EQ(recs.size(), 300u);
  EXPECT_EQ(recs.back().step, 300);
}

// An interrupted rank's last word: written after everything posted before it, nothing after it, though
// another thread goes on posting (the training thread runs until the process exits).
TEST(AsyncRecordWriter, PostLastIsTheLastRecordOnDisk) {
  const std::string path = temp_file("last.jsonl");
  JsonlWriter out(path);
  AsyncRecordWriter w(out);
  std::atomic<bool> stop{false};
  std::thread trainer([&] {
    for (int64_t s = 1; !stop; ++s) w.post(step_record(s));
  });
  while (std::filesystem::file_size(path) < 10000) std::this_thread::yield();
  Record e;
  e.kind = RecordKind::event;
  e.rank = 1;
  e.name = "interrupted";
  e.detail = "SIGTERM";
  w.post_last(e);
  const auto size = std::filesystem::file_size(path);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // several of the writer's 5 ms polls
  stop = true;
  trainer.join();
  w.drain();
  EXPECT_EQ(std::filesystem::file_size(path), size);
  auto recs = read_jsonl(path, nullptr);
  ASSERT_GT(recs.size(), 10u);
  EXPECT_EQ(recs.back().name, "interrupted");
  for (size_t i = 0; i + 1 < recs.size(); ++i) ASSERT_EQ(recs[i].step, static_cast<int64_t>(i + 1));
}

TEST(AsyncRecordWriter, AFailedWriteIsThrownOnThePostingThread) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  JsonlWriter out("/dev/full");  // every write fails with ENOSPC
  AsyncRecordWriter w(out);
  w.post(step_record(1));
  try {
    w.drain();
    FAIL() << "a failed write was not reported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "/dev/full: cannot write the step record of step 1: No space left on device");
  }
  w.drain();  // reported once, then cleared
}

}  // namespace
}  // namespace flatline
