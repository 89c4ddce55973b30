// LogStream (readers/reader.h): rank files streamed a chunk at a time and merged by t give exactly
// the records, order and warnings of read_log; JsonlReader's chunks keep line numbers across their
// boundaries; other formats are read whole.
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/input_file.h"
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

// JsonlReader::next_record, what the merges read with: the records, warnings and line numbers of the
// chunked reads, across chunk boundaries, with blank, malformed, binary, non-writer-form and
// half-written lines; a line without end refused with the same error.
TEST(Stream, RecordByRecordReadsAsChunksDo) {
  std::string text;
  for (int i = 1; i <= 600; ++i) {
    if (i == 70) text += "\n";
    else if (i == 150) text += "{\"kind\":\"step\",\"step\":\"x\"}\n";
    else if (i == 230) text += std::string("{\"kind\":\"st\x01p\"}\n");
    else if (i == 310) text += fmt::format("{{ \"kind\": \"step\", \"rank\": 0, \"t\": {}, \"step\": {} }}\n", i, i);
    else if (i == 390) text += fmt::format("{{\"kind\":\"event\",\"rank\":0,\"t\":{},\"step\":{},\"name\":\"error\",\"detail\":\"{}\"}}\n", i, i, std::string(5000, 'x'));
    else text += fmt::format("{{\"kind\":\"step\",\"rank\":0,\"t\":{},\"step\":{},\"loss\":{}}}\n", i, i, 2.5 + 1.0 / i);
  }
  text += "{\"kind\":\"step\",\"st";
  const std::string p = temp_file("by-record/rank-0.jsonl", text);
  Warnings whole_w;
  const auto whole = read_jsonl(p, &whole_w);
  ASSERT_EQ(whole.size(), 597u);
  ASSERT_EQ(whole_w.size(), 3u);
  for (size_t chunk : {size_t{4096}, size_t{1} << 20}) {
    JsonlReader r(p, chunk);
    std::vector<Record> all;
    Warnings w;
    Record rec;
    while (r.next_record(rec, &w)) {
      all.push_back(rec);
      rec = Record();
    }
    EXPECT_FALSE(r.next_record(rec, &w));  // (and stays ended, the last line said once)
    EXPECT_EQ(lines_of(all), lines_of(whole)) << chunk;
    EXPECT_EQ(w, whole_w) << chunk;
    EXPECT_EQ(r.offset(), text.size() - 18);
  }
  // A line running past kMaxRecordLineBytes: the error of the chunked read, word for word.
  const std::string q = temp_file("by-record/rank-1.jsonl", text.substr(0, 2000) + std::string(3 << 20, 'a'));
  for (size_t chunk : {size_t{64} << 10, size_t{1} << 20}) {
    std::string chunked, by_record;
    try {
      JsonlReader r(q, chunk);
      std::vector<Record> batch;
      while (r.next(batch, nullptr)) {
      }
    } catch (const InputError& e) {
      chunked = e.what();
    }
    try {
      JsonlReader r(q, chunk);
      Record rec;
      while (r.next_record(rec, nullptr)) rec = Record();
    } catch (const InputError& e) {
      by_record = e.what();
    }
    EXPECT_NE(chunked.find(": line 32 (byte offset 1953) runs past"), std::string::npos) << chunked;
    EXPECT_EQ(by_record, chunked);
  }
}

// A file's warnings are said in file order, as read_log says them, however its chunks interleave with
// the other files' records.
TEST(Stream, WarningsInFileOrder) {
  std::string r0, r1;
  for (int i = 1; i <= 3000; ++i) {
    r0 += i == 2900 ? std::string("{\"kind\":\"step\",\"step\":\"late\"}\n")
                    : fmt::format("{{\"kind\":\"step\",\"rank\":0,\"t\":{},\"step\":{},\"loss\":2.5}}\n", i, i);
    r1 += i == 10 ? std::string("{\"kind\":\"step\",\"step\":\"early\"}\n")
                  : fmt::format("{{\"kind\":\"step\",\"rank\":1,\"t\":{},\"step\":{},\"loss\":2.5}}\n", i, i);
  }
  const std::string p0 = temp_file("stream-order/telemetry/rank-0.jsonl", r0);
  const std::string p1 = temp_file("stream-order/telemetry/rank-1.jsonl", r1);
  const std::string dir = std::filesystem::path(p0).parent_path().parent_path().string();
  LogStream s(dir);
  EXPECT_EQ(drain(s, 100).size(), 5998u);
  const LogData whole = read_log(dir);
  EXPECT_EQ(s.warnings(), whole.warnings);
  ASSERT_EQ(s.warnings().size(), 2u);
  EXPECT_EQ(s.warnings()[0], p0 + ":2900: field 'step': expected an integer, got \"late\"");
  EXPECT_EQ(s.warnings()[1], p1 + ":10: field 'step': expected an integer, got \"early\"");
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
