// LogStream (readers/reader.h): rank files streamed a chunk at a time and merged by t give exactly
// the records, order and warnings of read_log; JsonlReader's chunks keep line numbers across their
// boundaries; other formats are read whole.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "telemetry/jsonl.h"
#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

std::vector<Record> drain(LogStream& s, size_t max) {
  std::vector<Record> all, batch;
  while (s.next(batch, max)) all.insert(all.end(), batch.begin(), batch.end());
  return all;
}

TEST(Stream, RankFilesMergeLikeReadLog) {
  for (const char* run : {"flatline/zero_grad_rank", "flatline/healthy"}) {
    LogData whole = read_log(logs(run));
    LogStream s(logs(run));
    EXPECT_TRUE(s.streaming());
    EXPECT_EQ(s.format(), "flatline");
    EXPECT_EQ(s.world_size(), whole.world_size);
    EXPECT_EQ(s.files(), whole.files);
    const auto got = drain(s, 7);  // small batches: the merge state carries across calls
    EXPECT_EQ(lines_of(got), lines_of(whole.records)) << run;
    EXPECT_EQ(s.records(), static_cast<int64_t>(whole.records.size()));
    EXPECT_EQ(replay(whole).cause, diagnose(logs(run)).cause);
  }
}

TEST(Stream, MixedUpRanksWarnAsReadLogDoes) {
  temp_file("stream-mixed/telemetry/rank-0.jsonl",
            "{\"kind\":\"step\",\"rank\":0,\"t\":1,\"step\":1,\"loss\":2.0}\n"
            "{\"kind\":\"step\",\"rank\":0,\"t\":3,\"step\":2,\"loss\":2.0}\n");
  const std::string p1 = temp_file("stream-mixed/telemetry/rank-1.jsonl",
                                   "{\"kind\":\"step\",\"rank\":0,\"t\":2,\"step\":1,\"loss\":2.0}\n");
  const std::string dir = std::filesystem::path(p1).parent_path().parent_path().string();
  LogStream s(dir);
  const auto got = drain(s, 100);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_DOUBLE_EQ(got[1].t, 2);
  EXPECT_EQ(s.warnings(), read_log(dir).warnings);
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_EQ(s.warnings()[0], p1 + ": 1 record(s) of rank 0 in the file of rank 1 (kept with the rank they name)");
}

TEST(Stream, ChunksKeepLineNumbersAndHalfWrittenLines) {
  std::string text;
  for (int i = 1; i <= 400; ++i) {
    if (i == 250) text += "{\"kind\":\"step\",\"step\":\"x\"}\n";
    else text += fmt::format("{{\"kind\":\"step\",\"rank\":0,\"t\":{},\"step\":{},\"loss\":2.5}}\n", i, i);
  }
  text += "{\"kind\":\"step\",\"st";
  const std::string p = temp_file("chunks/rank-0.jsonl", text);
  Warnings whole_w;
  const auto whole = read_jsonl(p, &whole_w);
  JsonlReader r(p, 4096);  // ~70 lines a chunk: line 250 is far from the first
  std::vector<Record> all, batch;
  Warnings w;
  while (r.next(batch, &w)) all.insert(all.end(), batch.begin(), batch.end());
  EXPECT_EQ(lines_of(all), lines_of(whole));
  EXPECT_EQ(all.size(), 399u);
  EXPECT_EQ(w, whole_w);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], p + ":250: field 'step': expected an integer, got \"x\"");
  EXPECT_EQ(w[1], p + ":401: last line has no newline (half-written?), 18 bytes ignored");
}

TEST(Stream, OtherFormatsAreReadWhole) {
  LogStream s(logs("megatron/healthy.log"));
  EXPECT_FALSE(s.streaming());
  EXPECT_EQ(s.format(), "megatron");
  EXPECT_EQ(drain(s, 16).size(), 60u);
  EXPECT_THROW(LogStream("/nonexistent/dir"), ReadError);
}

}  // namespace
}  // namespace flatline::testing
