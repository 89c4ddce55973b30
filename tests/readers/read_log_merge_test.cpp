// read_log on a directory of flatline rank files merges them as it reads them (readers/reader.cpp
// merge_rank_files): the result must be exactly what reading each file whole (read_jsonl) and
// merge_by_time give, with read_log's warnings and refusals, whatever the files hold: t in order, t
// going back now and then or throughout, records without t, ties, empty and malformed files, records
// of another rank. The reference below is that file-by-file read, written out.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "core/input_file.h"
#include "telemetry/jsonl.h"
#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

// What read_log gives reading each rank file whole and merging them (the files in read_log's order).
LogData file_by_file(const std::vector<std::string>& files) {
  LogData d;
  d.format = "flatline";
  Warnings refused;
  std::vector<std::vector<Record>> per_file;
  for (const auto& f : files) {
    auto recs = read_jsonl(f, &d.warnings);
    if (recs.empty()) {
      refused.push_back(f + ": no usable records as flatline");
      continue;
    }
    d.files.push_back(f);
    per_file.push_back(std::move(recs));
  }
  d.warnings.insert(d.warnings.begin(), refused.begin(), refused.end());
  int max_rank = -1;
  for (size_t i = 0; i < per_file.size(); ++i) {
    const std::string stem = std::filesystem::path(d.files[i]).stem().string();
    const bool named = stem.rfind("rank-", 0) == 0;
    const int rank = named ? std::stoi(stem.substr(5)) : -1;
    int64_t other = 0;
    int other_rank = -1;
    for (const auto& r : per_file[i]) {
      if (named && r.rank != rank) ++other, other_rank = r.rank;
      max_rank = std::max(max_rank, r.rank);
    }
    if (other)
      d.warnings.push_back(fmt::format("{}: {} record(s) of rank {} in the file of rank {} (kept with the rank they name)",
                                       d.files[i], other, other_rank, rank));
  }
  d.world_size = std::max(static_cast<int>(per_file.size()), max_rank + 1);
  d.records = merge_by_time(std::move(per_file));
  return d;
}

void expect_file_by_file(const std::string& dir) {
  const LogData got = read_log(dir);
  const LogData want = file_by_file(locate_log(dir).files);
  EXPECT_EQ(got.format, want.format) << dir;
  EXPECT_EQ(got.files, want.files) << dir;
  EXPECT_EQ(got.world_size, want.world_size) << dir;
  EXPECT_EQ(got.warnings, want.warnings) << dir;
  ASSERT_EQ(got.records.size(), want.records.size()) << dir;
  EXPECT_EQ(lines_of(got.records), lines_of(want.records)) << dir;
}

std::string step_line(int rank, const std::string& t, int64_t step) {
  return fmt::format("{{\"kind\":\"step\",\"rank\":{}{},\"step\":{},\"loss\":2.5}}\n", rank, t.empty() ? "" : ",\"t\":" + t,
                     step);
}

// A run of `ranks` files of `steps` records whose t is produced by `t_of(rank, i)` ("" for none).
template <class T>
std::string run(const std::string& name, int ranks, int steps, T t_of) {
  std::string dir;
  for (int r = 0; r < ranks; ++r) {
    std::string text;
    for (int i = 0; i < steps; ++i) text += step_line(r, t_of(r, i), i);
    dir = std::filesystem::path(temp_file(name + "/telemetry/rank-" + std::to_string(r) + ".jsonl", text))
              .parent_path()
              .parent_path()
              .string();
  }
  return dir;
}

TEST(ReadLogMerge, InOrderRunsMergeAsFileByFile) {
  expect_file_by_file(logs("flatline/zero_grad_rank"));
  expect_file_by_file(logs("flatline/healthy"));
  expect_file_by_file(run("merge-in-order", 5, 3000, [](int r, int i) { return fmt::format("{}", i + 0.1 * r); }));
  // ties everywhere: the lower file first
  expect_file_by_file(run("merge-ties", 4, 500, [](int, int i) { return fmt::format("{}", i / 3); }));
}

TEST(ReadLogMerge, TimeGoingBackIsSortedAsFileByFile) {
  std::mt19937 rng(7);
  // now and then (a heartbeat stamped before the step logged before it)
  expect_file_by_file(run("merge-nearly", 6, 4000, [&](int r, int i) {
    const double t = i + 0.01 * r - (rng() % 50 == 0 ? 1.5 : 0.0);
    return fmt::format("{}", t);
  }));
  // throughout: a file read backwards, random times, times missing or not finite
  expect_file_by_file(run("merge-backwards", 3, 3000, [](int r, int i) { return fmt::format("{}", r == 1 ? 3000 - i : i); }));
  expect_file_by_file(run("merge-random", 4, 2000, [&](int, int i) -> std::string {
    switch (rng() % 8) {
      case 0: return "";
      case 1: return "\"nan\"";
      case 2: return "\"inf\"";
      case 3: return fmt::format("{}", rng() % 5);
      default: return fmt::format("{}", (rng() % 100000) / 100.0 + i * 0.001);
    }
  }));
}

TEST(ReadLogMerge, EmptyMalformedAndMixedFilesAsFileByFile) {
  temp_file("merge-odd/telemetry/rank-0.jsonl", step_line(0, "1", 1) + "not json\n" + step_line(0, "2", 2) +
                                                    "{\"kind\":\"step\",\"rank\":0,\"t\":3,\"st");
  temp_file("merge-odd/telemetry/rank-1.jsonl", "garbage\n{}\n");  // no record: refused
  temp_file("merge-odd/telemetry/rank-2.jsonl", step_line(2, "1", 1) + "[1]\n" + step_line(5, "1.5", 1) + "\n");
  temp_file("merge-odd/telemetry/rank-3.jsonl", "");
  const std::string p = temp_file("merge-odd/telemetry/other.jsonl", step_line(7, "0.5", 1));
  const std::string dir = std::filesystem::path(p).parent_path().parent_path().string();
  expect_file_by_file(dir);
  const LogData d = read_log(dir);
  EXPECT_EQ(d.files.size(), 3u);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.records.size(), 5u);
}

TEST(ReadLogMerge, AFileThatCannotBeReadIsNamedAsFileByFile) {
  // rank-0's bad line is further in than rank-1's, but rank-0 is read first: its error is the one.
  std::string text;
  for (int i = 0; i < 30000; ++i) text += step_line(0, std::to_string(i), i);
  text += std::string(3 << 20, 'x') + "\n";
  const std::string p0 = temp_file("merge-bad/telemetry/rank-0.jsonl", text);
  temp_file("merge-bad/telemetry/rank-1.jsonl", std::string(3 << 20, 'y') + "\n");
  const std::string dir = std::filesystem::path(p0).parent_path().parent_path().string();
  try {
    read_log(dir);
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p0 + ": a telemetry file: line 30001 (byte offset ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace flatline::testing
