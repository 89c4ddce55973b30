// Bad input, every reader: truncated files, half-written last lines, corrupt CRCs, mixed-up ranks,
// duplicate and out-of-order steps, non-numeric fields, empty files, binary junk. Each gives a
// warning (or, when nothing is usable, a ReadError) naming the file and line or byte offset, exactly;
// and whatever is valid is still read and diagnosed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "telemetry/tfrecord.h"
#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
bool has(const Warnings& w, const std::string& s) { return std::find(w.begin(), w.end(), s) != w.end(); }
std::string dump(const Warnings& w) {
  std::string s;
  for (const auto& x : w) s += x + "\n";
  return s;
}
const char* kMeg =
    " iteration       10/     100 | consumed samples:         2560 | elapsed time per iteration (ms): 500.0 | "
    "learning rate: 3.000000E-04 | global batch size:   256 | lm loss: 2.500000E+00 | loss scale: 1.0 | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |\n";

TEST(BadInput, EmptyAndMissingFilesAreErrors) {
  const std::string p = temp_file("empty.jsonl", "");
  try {
    read_log(p);
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), p + ": empty file");
  }
  try {
    read_log("/nonexistent/x.log");
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/x.log: no such file or directory");
  }
}

TEST(BadInput, BinaryJunkFileIsAnUnknownFormat) {
  const std::string p = temp_file("junk.bin", std::string("\x00\x01\x02garbage\xff\xfe", 12));
  try {
    read_log(p);
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()),
              p + ": unknown log format (force one with --format flatline|hf|megatron|deepspeed|lightning|wandb|wandb-run|tensorboard|console)");
  }
  EXPECT_THROW(read_log(p, "megatron"), ReadError);  // forced: no iteration lines
}

TEST(BadInput, JsonlHalfWrittenLastLineAndGarbage) {
  std::string good = read_all(logs("flatline/lr_zero/telemetry/rank-0.jsonl"));
  const std::string p = temp_file("rank-0.jsonl", "{\"kind\":\"step\"\n" + good + "{\"kind\":\"step\",\"ra");
  LogData log = read_log(p);
  EXPECT_TRUE(has(log.warnings, p + ":1: not valid JSON")) << dump(log.warnings);
  const size_t last = 2 + static_cast<size_t>(std::count(good.begin(), good.end(), '\n'));
  EXPECT_TRUE(has(log.warnings, p + ":" + std::to_string(last) + ": last line has no newline (half-written?), 18 bytes ignored"))
      << dump(log.warnings);
  EXPECT_EQ(replay(log).cause, "lr_zero");
}

TEST(BadInput, JsonlNonNumericFieldAndMixedUpRanks) {
  const std::string dir = temp_file("mixed/telemetry/.keep", "");
  (void)dir;
  const std::string p0 = temp_file("mixed/telemetry/rank-0.jsonl",
                                   "{\"kind\":\"step\",\"rank\":0,\"t\":1,\"step\":1,\"loss\":\"abc\"}\n"
                                   "{\"kind\":\"step\",\"rank\":0,\"t\":2,\"step\":2,\"loss\":2.0}\n");
  const std::string p1 = temp_file("mixed/telemetry/rank-1.jsonl",
                                   "{\"kind\":\"step\",\"rank\":0,\"t\":1.5,\"step\":1,\"loss\":2.0}\n");
  LogData log = read_log(std::filesystem::path(p0).parent_path().parent_path().string());
  EXPECT_TRUE(has(log.warnings, p0 + ":1: field 'loss': expected a number, got \"abc\"")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p1 + ": 1 record(s) of rank 0 in the file of rank 1 (kept with the rank they name)"))
      << dump(log.warnings);
  ASSERT_EQ(log.records.size(), 2u);
  EXPECT_DOUBLE_EQ(log.records[0].t, 1.5);  // merged by t across the files
  EXPECT_EQ(log.world_size, 2);
}

TEST(BadInput, MegatronJunkDuplicatesOutOfOrderAndBadNumbers) {
  std::string bad = kMeg;
  bad.replace(bad.find("2.500000E+00"), 12, "abc");
  std::string twenty = kMeg;
  twenty.replace(twenty.find("10/"), 3, "20/");
  const std::string p = temp_file("bad.log", std::string(kMeg) + std::string("\x01\x02\x03 junk\n", 9) + twenty + twenty +
                                                 kMeg + bad.replace(bad.find("10/"), 3, "30/"));
  LogData log = read_log(p);
  EXPECT_TRUE(has(log.warnings, p + ":2: binary data (8 bytes), line skipped")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":4: duplicate step 20 (rank 0), dropped")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":5: step 10 after step 20 (rank 0): out of order or a restart, kept"));
  EXPECT_TRUE(has(log.warnings, p + ":6: field 'lm loss': expected a number, got 'abc'")) << dump(log.warnings);
  ASSERT_EQ(log.records.size(), 4u);
  EXPECT_FALSE(log.records[3].loss.has_value());
  EXPECT_DOUBLE_EQ(*log.records[3].lr, 3e-4);  // the rest of the line is kept
}

TEST(BadInput, HfTruncatedStateKeepsCompleteEntries) {
  std::string s = read_all(logs("hf/lr_zero/trainer_state.json"));
  const size_t cut = s.find("\"step\": 450");
  const std::string p = temp_file("trainer_state.json", s.substr(0, cut));
  LogData log = read_log(p);
  ASSERT_EQ(log.warnings.size(), 1u);
  const size_t entry_line = static_cast<size_t>(std::count(s.begin(), s.begin() + static_cast<long>(s.rfind('{', cut)), '\n')) + 1;
  EXPECT_EQ(log.warnings[0], p + ":" + std::to_string(entry_line) +
                                 ": log_history entry not a complete object (truncated or corrupt); reading stops");
  EXPECT_EQ(log.records.back().step, 440);
  Diagnosis d = replay(log);
  EXPECT_EQ(d.cause, "lr_zero");
  EXPECT_EQ(d.detected_step, 410);
}

TEST(BadInput, HfEntriesWithoutStepOrWithStringsAndNoLogHistory) {
  const std::string p = temp_file("trainer_state.json",
                                  "{\"log_history\": [\n{\"loss\": 1.0},\n{\"loss\": \"x\", \"learning_rate\": NaN, \"step\": 5},\n"
                                  "{\"loss\": 2.0, \"step\": 5}\n]}\n");
  LogData log = read_log(p);
  EXPECT_TRUE(has(log.warnings, p + ":2: log_history entry without a valid \"step\", skipped")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":3: field 'loss': expected a number, got \"x\"")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":4: duplicate step 5 (rank 0), dropped")) << dump(log.warnings);
  ASSERT_EQ(log.records.size(), 1u);
  EXPECT_TRUE(std::isnan(*log.records[0].lr));
  const std::string q = temp_file("trainer_state.json", "{\"global_step\": 3}\n");
  try {
    read_log(q);
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), q + ": not a trainer_state.json: no \"log_history\"");
  }
}

TEST(BadInput, CsvShortRowsNonNumericAndHalfWrittenLastRow) {
  const std::string p = temp_file("metrics.csv",
                                  "epoch,lr-AdamW,step,train_loss\n0,0.001,1,2.5\n0,0.001,2\n0,0.001,3,abc\n0,0.001,4,2.4\n0,0.0");
  LogData log = read_log(p);
  EXPECT_TRUE(has(log.warnings, p + ":3: 3 fields, the header has 4; row skipped")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":4: column 'train_loss': expected a number, got 'abc'")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":6: last row has no newline (half-written?), skipped")) << dump(log.warnings);
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[1].step, 3);
  EXPECT_FALSE(log.records[1].loss.has_value());
  EXPECT_DOUBLE_EQ(*log.records[1].lr, 0.001);
}

TEST(BadInput, CsvQuoteErrorStopsWithByteOffset) {
  const std::string p = temp_file("w.csv", "_step,train/loss\n0,1.0\n1,\"2.0\"x\n2,3.0\n");
  LogData log = read_log(p);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_EQ(log.warnings[0], p + ":3: error parsing data while strict checking enabled (byte 30); reading stops");
  EXPECT_EQ(log.records.size(), 1u);
}

TEST(BadInput, TensorBoardCorruptAndTruncatedStillDiagnosed) {
  std::string s = read_all(logs("tensorboard/lr_zero/events.out.tfevents.1704110400.host.1.0"));
  // Corrupt one data byte of the 5th record, and cut the file inside its last record.
  auto split = split_tfrecords(s, "x", nullptr);
  const uint64_t off = split[4].offset;
  s[off + 14] ^= 0x55;
  s.resize(s.size() - 5);
  const std::string p = temp_file("events.out.tfevents.1.bad", s);
  LogData log = read_log(p);
  ASSERT_EQ(log.warnings.size(), 2u) << dump(log.warnings);
  EXPECT_EQ(log.warnings[0], p + ": byte " + std::to_string(off) + ": corrupt data CRC, record skipped");
  EXPECT_EQ(log.warnings[1], p + ": byte " + std::to_string(split.back().offset) +
                                 ": truncated record (" + std::to_string(split.back().data.size()) + " data bytes announced, " +
                                 std::to_string(split.back().data.size() - 1) + " left); reading stops");
  EXPECT_EQ(replay(log).cause, "lr_zero");
}

TEST(BadInput, DeepSpeedUnreadableNumbers) {
  const std::string p = temp_file("ds.log",
                                  "step=abc, skipped=0, lr=[0.1]\n"
                                  "step=10, skipped=0, lr=[zz], mom=[(0.9, 0.999)]\n"
                                  "step=20, skipped=0, lr=[0.1], mom=[(0.9, 0.999)]\n");
  LogData log = read_log(p);
  EXPECT_TRUE(has(log.warnings, p + ":1: DeepSpeed progress line without a readable step=, skipped")) << dump(log.warnings);
  EXPECT_TRUE(has(log.warnings, p + ":2: unreadable lr=")) << dump(log.warnings);
  ASSERT_EQ(log.records.size(), 2u);
  EXPECT_FALSE(log.records[0].lr.has_value());
}

TEST(BadInput, DeepSpeedCorruptCounterMakesNoRecords) {
  // A counter that rose by 8e15 is the record's opt_step, not 8e15 skipped records made up.
  Warnings w;
  auto recs = parser_for("deepspeed")("step=10, skipped=0, lr=[0.1]\nstep=9000000000000000, skipped=8000000000000000, lr=[0.1]\n",
                                  "ds", &w);
  EXPECT_TRUE(w.empty()) << w.front();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(*recs[1].opt_step, 1000000000000000);
  EXPECT_FALSE(recs[1].skipped.value_or(false));
}

TEST(BadInput, UnknownFormatNameIsRejected) {
  try {
    parse_log_format("csv");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown log format 'csv' (expected auto|flatline|hf|megatron|deepspeed|lightning|wandb|wandb-run|tensorboard|console)");
  }
}

}  // namespace
}  // namespace flatline::testing
