// JSONL telemetry codec: exact round trips, errors that name file:line and the field, tolerant whole-file
// reading, tailing a file that is still being written, and byte-identical output.
#include "telemetry/jsonl.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace flatline {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "flatline_jsonl_" + name + "_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

void write_file(const std::string& path, const std::string& text, bool append = false) {
  std::ofstream out(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
  out << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Record full_step() {
  Record r;
  r.kind = RecordKind::step;
  r.rank = 3;
  r.t = 12.345678901234567;
  r.step = 400;
  r.opt_step = 398;
  r.loss = 2.302585092994046;
  r.loss_avg = 2.3;
  r.lr = 3.0e-3;
  r.grad_norm = 0.1;
  r.local_grad_norm = 1e-300;
  r.grad_zero_frac = 0.0;
  r.param_norm = 123456.789;
  r.update_norm = 5e-7;
  r.loss_scale = 65536;
  r.overflow = false;
  r.skipped = true;
  r.batch_hash = 0xfedcba9876543210ULL;
  r.epoch = 2;
  r.samples_seen = 6400;
  r.step_ms = 35.25;
  r.comm_ms = 0.5;
  r.eval_loss = 2.5;
  return r;
}

void expect_same(const Record& a, const Record& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.rank, b.rank);
  if (std::isnan(a.t)) EXPECT_TRUE(std::isnan(b.t));
  else EXPECT_EQ(a.t, b.t);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.opt_step, b.opt_step);
  EXPECT_EQ(a.loss_avg, b.loss_avg);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  EXPECT_EQ(a.local_grad_norm, b.local_grad_norm);
  EXPECT_EQ(a.grad_zero_frac, b.grad_zero_frac);
  EXPECT_EQ(a.param_norm, b.param_norm);
  EXPECT_EQ(a.update_norm, b.update_norm);
  EXPECT_EQ(a.loss_scale, b.loss_scale);
  EXPECT_EQ(a.overflow, b.overflow);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.batch_hash, b.batch_hash);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.samples_seen, b.samples_seen);
  EXPECT_EQ(a.step_ms, b.step_ms);
  EXPECT_EQ(a.comm_ms, b.comm_ms);
  EXPECT_EQ(a.phase, b.phase);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.detail, b.detail);
  EXPECT_EQ(a.eval_loss, b.eval_loss);
}

TEST(Jsonl, StepRecordRoundTripsEveryField) {
  Record r = full_step();
  std::string line = to_json(r);
  Record back = parse_record(line, "x.jsonl", 1);
  expect_same(r, back);
  EXPECT_EQ(back.loss, r.loss);
  EXPECT_NE(line.find("\"batch_hash\":\"fedcba9876543210\""), std::string::npos) << line;
  EXPECT_EQ(line.rfind("{\"kind\":\"step\",\"rank\":3,", 0), 0u) << line;
  EXPECT_EQ(to_json(back), line);
}

TEST(Jsonl, NonFiniteValuesRoundTripAsStrings) {
  Record r = full_step();
  r.loss = std::numeric_limits<double>::infinity();
  r.loss_avg = -std::numeric_limits<double>::infinity();
  r.grad_norm = std::numeric_limits<double>::quiet_NaN();
  r.t = std::numeric_limits<double>::quiet_NaN();
  std::string line = to_json(r);
  EXPECT_NE(line.find("\"loss\":\"inf\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"loss_avg\":\"-inf\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"grad_norm\":\"nan\""), std::string::npos) << line;
  Record back = parse_record(line, "x.jsonl", 1);
  ASSERT_TRUE(back.loss);
  EXPECT_TRUE(std::isinf(*back.loss) && *back.loss > 0);
  EXPECT_TRUE(std::isinf(*back.loss_avg) && *back.loss_avg < 0);
  EXPECT_TRUE(std::isnan(*back.grad_norm));
  EXPECT_TRUE(std::isnan(back.t));
  // Other writers' spellings.
  Record o = parse_record(R"({"kind":"step","step":1,"loss":"NaN","lr":"Infinity","grad_norm":"-Infinity"})", "o", 1);
  EXPECT_TRUE(std::isnan(*o.loss));
  EXPECT_EQ(*o.lr, std::numeric_limits<double>::infinity());
  EXPECT_EQ(*o.grad_norm, -std::numeric_limits<double>::infinity());
}

TEST(Jsonl, MissingFieldsStayMissing) {
  Record r;
  r.kind = RecordKind::heartbeat;
  r.rank = 1;
  r.t = 0.5;
  r.step = 7;
  r.phase = "collective";
  std::string line = to_json(r);
  EXPECT_EQ(line, R"({"kind":"heartbeat","rank":1,"t":0.5,"step":7,"phase":"collective"})");
  Record back = parse_record(line, "x", 1);
  expect_same(r, back);
  EXPECT_FALSE(back.loss);
  EXPECT_FALSE(back.batch_hash);
  EXPECT_FALSE(back.overflow);
}

TEST(Jsonl, EventAndEvalRecordsRoundTrip) {
  Record e;
  e.kind = RecordKind::event;
  e.rank = 0;
  e.t = 99.5;
  e.step = 350;
  e.name = "error";
  e.detail = "rank 1: \"timeout\"\n\tin allreduce \\ 30 s";
  Record back = parse_record(to_json(e), "x", 1);
  expect_same(e, back);

  Record v;
  v.kind = RecordKind::eval;
  v.t = 1;
  v.step = 200;
  v.eval_loss = 1.875;
  expect_same(v, parse_record(to_json(v), "x", 1));
  EXPECT_EQ(to_json(v), R"({"kind":"eval","rank":0,"t":1,"step":200,"eval_loss":1.875})");
}

TEST(Jsonl, InvalidUtf8InADetailIsReplacedNotThrown) {
  Record e;
  e.kind = RecordKind::event;
  e.t = 1;
  e.name = "error";
  e.detail = std::string("bad byte \xff here");
  std::string line;
  ASSERT_NO_THROW(line = to_json(e));
  Record back = parse_record(line, "x", 1);
  EXPECT_EQ(back.detail, "bad byte \xEF\xBF\xBD here");  // U+FFFD
}

TEST(Jsonl, BatchHashAcceptsShortAndUppercaseHex) {
  EXPECT_EQ(*parse_record(R"({"kind":"step","step":1,"batch_hash":"ff"})", "x", 1).batch_hash, 255u);
  EXPECT_EQ(*parse_record(R"({"kind":"step","step":1,"batch_hash":"DEADBEEF"})", "x", 1).batch_hash, 0xdeadbeefu);
  EXPECT_EQ(*parse_record(R"({"kind":"step","step":1,"batch_hash":"ffffffffffffffff"})", "x", 1).batch_hash,
            ~uint64_t{0});
}

// Returns the message of the ParseError that parsing `line` throws (or "" if it does not throw).
std::string parse_error(const std::string& line, size_t line_no = 7) {
  try {
    parse_record(line, "run/rank-0.jsonl", line_no);
  } catch (const ParseError& e) {
    EXPECT_EQ(e.file, "run/rank-0.jsonl");
    EXPECT_EQ(e.line, line_no);
    return e.what();
  }
  return "";
}

TEST(Jsonl, ParseErrorsNameFileLineAndField) {
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"loss\":true}"),
            "run/rank-0.jsonl:7: field 'loss': expected a number, got true");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"loss\":\"high\"}"),
            "run/rank-0.jsonl:7: field 'loss': expected a number, got \"high\"");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1.5}"),
            "run/rank-0.jsonl:7: field 'step': expected an integer, got 1.5");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"overflow\":\"no\"}"),
            "run/rank-0.jsonl:7: field 'overflow': expected true/false, got \"no\"");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"phase\":3}"),
            "run/rank-0.jsonl:7: field 'phase': expected a string, got 3");
  EXPECT_EQ(parse_error("{\"kind\":\"bogus\",\"step\":1}"),
            "run/rank-0.jsonl:7: field 'kind': expected step|heartbeat|event|eval, got 'bogus'");
  EXPECT_EQ(parse_error("{\"step\":1}"), "run/rank-0.jsonl:7: field 'kind': expected step|heartbeat|event|eval, got ''");
  EXPECT_EQ(parse_error("{\"kind\":\"step\"}"), "run/rank-0.jsonl:7: missing field 'step'");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"batch_hash\":\"xyz\"}"),
            "run/rank-0.jsonl:7: field 'batch_hash': expected up to 16 hex digits, got 'xyz'");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"batch_hash\":\"-1\"}"),
            "run/rank-0.jsonl:7: field 'batch_hash': expected up to 16 hex digits, got '-1'");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"batch_hash\":\"10000000000000000\"}"),
            "run/rank-0.jsonl:7: field 'batch_hash': expected up to 16 hex digits, got '10000000000000000'");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,"), "run/rank-0.jsonl:7: not valid JSON");
  EXPECT_EQ(parse_error("[1,2]"), "run/rank-0.jsonl:7: expected a JSON object");
}

// The parser (simdjson On-Demand) rejects what a strict JSON parser rejects on the fields it reads,
// and reports the first bad field in the writer's field order whatever the order in the line.
TEST(Jsonl, StrictWhereItReadsAndFieldOrderForErrors) {
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1} x"), "run/rank-0.jsonl:7: not valid JSON");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1}}"), "run/rank-0.jsonl:7: not valid JSON");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"detail\":\"\xff\xfe\"}"), "run/rank-0.jsonl:7: not valid JSON");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":01}"),  // a malformed number: named with its field
            "run/rank-0.jsonl:7: field 'step': expected an integer, got 01");
  EXPECT_EQ(parse_error("\"a string\""), "run/rank-0.jsonl:7: expected a JSON object");
  EXPECT_EQ(parse_error("nope"), "run/rank-0.jsonl:7: not valid JSON");
  EXPECT_EQ(parse_error("{\"loss\":\"x\",\"kind\":\"step\",\"rank\":\"y\",\"step\":1}"),
            "run/rank-0.jsonl:7: field 'rank': expected an integer, got \"y\"");
  EXPECT_EQ(parse_error("{\"kind\":\"step\",\"step\":1,\"loss\":[1, 2]}"),
            "run/rank-0.jsonl:7: field 'loss': expected a number, got [1, 2]");
  Record r = parse_record(R"({"step":3,"detail":"caf\u00e9 \"q\"\n","kind":"event","name":"error","t":"-Infinity"})", "x", 1);
  EXPECT_EQ(r.kind, RecordKind::event);
  EXPECT_EQ(r.detail, "caf\xc3\xa9 \"q\"\n");
  EXPECT_TRUE(std::isinf(r.t) && r.t < 0);
  EXPECT_EQ(parse_record(R"({"kind":"step","step":1,"rank":7,"lr":null,"loss":1e2})", "x", 1).loss, 100.0);
}

TEST(Jsonl, UnknownFieldsAndIntegralFloatsAreAccepted) {
  Record r = parse_record(R"({"kind":"step","step":10.0,"rank":2,"future_field":{"a":1},"epoch":3.0})", "x", 1);
  EXPECT_EQ(r.step, 10);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.epoch, 3);
}

TEST(Jsonl, ReadSkipsMalformedLinesWithWarnings) {
  std::string path = temp_path("read");
  Record a = full_step(), b = full_step();
  b.step = 401;
  write_file(path, to_json(a) + "\n" + "not json\n" + "\n" + "{\"kind\":\"step\",\"step\":\"x\"}\n" + to_json(b) +
                       "\r\n" + "{\"kind\":\"step\",\"step\":402,\"lo");
  std::vector<std::string> warnings;
  std::vector<Record> recs = read_jsonl(path, &warnings);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].step, 400);
  EXPECT_EQ(recs[1].step, 401);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0], path + ":2: not valid JSON");
  EXPECT_EQ(warnings[1], path + ":4: field 'step': expected an integer, got \"x\"");
  EXPECT_EQ(warnings[2], path + ":6: last line has no newline (half-written?), 29 bytes ignored");
  // Without a warnings sink it still reads.
  EXPECT_EQ(read_jsonl(path, nullptr).size(), 2u);
}

TEST(Jsonl, ReadMissingFileThrowsNamingIt) {
  std::string path = temp_path("does_not_exist");
  try {
    read_jsonl(path, nullptr);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": a telemetry file: cannot open: No such file or directory");
  }
}

TEST(Jsonl, TailReturnsOnlyCompleteLinesAcrossAppends) {
  std::string path = temp_path("tail");
  std::remove(path.c_str());
  JsonlTail tail(path);
  std::vector<Record> out;
  std::vector<std::string> warnings;
  EXPECT_EQ(tail.poll(out, &warnings), 0u);  // not created yet
  EXPECT_EQ(tail.path(), path);

  Record a = full_step(), b = full_step();
  b.step = 401;
  std::string lb = to_json(b);
  write_file(path, to_json(a) + "\n" + lb.substr(0, 20));
  EXPECT_EQ(tail.poll(out, &warnings), 1u);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].step, 400);
  EXPECT_EQ(tail.poll(out, &warnings), 0u);  // the partial line is held back
  write_file(path, lb.substr(20, 30), /*append=*/true);
  EXPECT_EQ(tail.poll(out, &warnings), 0u);
  write_file(path, lb.substr(50) + "\n" + "garbage\n", /*append=*/true);
  EXPECT_EQ(tail.poll(out, &warnings), 1u);
  ASSERT_EQ(out.size(), 2u);
  expect_same(b, out[1]);
  EXPECT_EQ(out[1].loss, b.loss);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], path + ":3: not valid JSON");  // line numbers continue across polls
  EXPECT_EQ(tail.poll(out, &warnings), 0u);
}

TEST(Jsonl, WriterOutputIsByteIdenticalAndReadable) {
  std::vector<Record> recs;
  for (int i = 1; i <= 50; ++i) {
    Record r = full_step();
    r.step = i;
    r.t = i * 0.1;
    r.loss = 1.0 / i;
    r.batch_hash = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(i);
    recs.push_back(r);
  }
  std::string p1 = temp_path("w1"), p2 = temp_path("w2");
  {
    JsonlWriter w1(p1), w2(p2);
    for (const auto& r : recs) {
      w1.write(r);
      w2.write(r);
    }
  }
  std::string a = read_file(p1);
  EXPECT_EQ(a, read_file(p2));
  EXPECT_EQ(std::count(a.begin(), a.end(), '\n'), 50);
  std::vector<std::string> warnings;
  std::vector<Record> back = read_jsonl(p1, &warnings);
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(back.size(), recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    expect_same(recs[i], back[i]);
    EXPECT_EQ(recs[i].loss, back[i].loss);
  }
  // Append mode continues the file; the default truncates it.
  {
    JsonlWriter w(p1, /*append=*/true);
    w.write(recs[0]);
  }
  EXPECT_EQ(read_jsonl(p1, nullptr).size(), 51u);
  { JsonlWriter w(p1); }
  EXPECT_EQ(read_file(p1), "");
}

TEST(Jsonl, WriterToAnUnwritablePathThrowsNamingIt) {
  std::string path = ::testing::TempDir() + "no_such_dir_flatline/rank-0.jsonl";
  try {
    JsonlWriter w(path);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot open for writing", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace flatline
