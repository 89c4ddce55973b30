// The JSONL codec's two parsers (telemetry/jsonl.h jsonl_detail): the one-pass parser of the writer's
// own form must give, on every line it accepts, exactly the Record simdjson On-Demand gives (every
// field, doubles bit for bit), and must accept every line the writer writes. Lines are generated from
// a fixed seed: writer lines with random values, JSON numbers of every shape in every kind of field,
// and random edits of writer lines (the edited line is often still valid JSON, sometimes in ways the
// one-pass parser must decline).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "telemetry/jsonl.h"

namespace flatline {
namespace {

using jsonl_detail::parse_general;
using jsonl_detail::parse_writer_form;

uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// "" when a and b are the same Record, field by field (doubles bit for bit), else the first difference.
std::string difference(const Record& a, const Record& b) {
  auto dbl = [](const char* name, const std::optional<double>& x, const std::optional<double>& y) -> std::string {
    if (x.has_value() != y.has_value()) return std::string(name) + ": present in one only";
    if (x && bits(*x) != bits(*y)) return std::string(name) + ": " + std::to_string(*x) + " vs " + std::to_string(*y);
    return "";
  };
  auto other = [](const char* name, bool same) -> std::string { return same ? "" : std::string(name) + " differs"; };
  for (const std::string& d :
       {other("kind", a.kind == b.kind), other("rank", a.rank == b.rank), dbl("t", a.t, b.t), other("step", a.step == b.step),
        other("opt_step", a.opt_step == b.opt_step), dbl("loss", a.loss, b.loss), dbl("loss_avg", a.loss_avg, b.loss_avg),
        dbl("lr", a.lr, b.lr), dbl("grad_norm", a.grad_norm, b.grad_norm),
        dbl("local_grad_norm", a.local_grad_norm, b.local_grad_norm),
        dbl("grad_zero_frac", a.grad_zero_frac, b.grad_zero_frac), dbl("param_norm", a.param_norm, b.param_norm),
        dbl("update_norm", a.update_norm, b.update_norm), dbl("loss_scale", a.loss_scale, b.loss_scale),
        other("overflow", a.overflow == b.overflow), other("skipped", a.skipped == b.skipped),
        other("batch_hash", a.batch_hash == b.batch_hash), other("epoch", a.epoch == b.epoch),
        other("samples_seen", a.samples_seen == b.samples_seen), dbl("step_ms", a.step_ms, b.step_ms),
        dbl("comm_ms", a.comm_ms, b.comm_ms), other("param_mismatches", a.param_mismatches == b.param_mismatches),
        other("phase", a.phase == b.phase), other("name", a.name == b.name), other("detail", a.detail == b.detail),
        dbl("eval_loss", a.eval_loss, b.eval_loss)})
    if (!d.empty()) return d;
  return "";
}

// Both parsers on `line`. Returns whether the one-pass parser accepted it; fails the test when it
// accepted a line simdjson rejects or read it differently.
bool check(const std::string& line) {
  Record fast, general;
  const bool accepted = parse_writer_form(line, fast);
  const std::string error = parse_general(line, general);
  if (accepted) {
    EXPECT_EQ(error, "") << "accepted a line simdjson rejects: " << line;
    if (error.empty()) {
      EXPECT_EQ(difference(fast, general), "") << line;
    }
  }
  return accepted;
}

struct Gen {
  std::mt19937_64 rng{20261204};
  uint64_t u64() { return rng(); }
  int below(int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); }
  bool coin() { return rng() & 1; }

  // A double of any kind: random bits (any exponent, subnormals, inf, nan), values of a training run's
  // scale, round decimals, exact integers, zeros.
  double any_double() {
    switch (below(6)) {
      case 0: {
        double d;
        const uint64_t b = u64();
        std::memcpy(&d, &b, sizeof d);
        return d;
      }
      case 1: return std::ldexp(static_cast<double>(u64() >> 11), -53 + below(40) - 20) * (coin() ? 1 : -1);
      case 2: return static_cast<double>(below(2000000)) / std::pow(10.0, below(12));
      case 3: return static_cast<double>(static_cast<int64_t>(u64() >> below(64)));
      case 4: return coin() ? 0.0 : -0.0;
      default: return std::ldexp(static_cast<double>(u64() >> 11), below(2100) - 1074 - 53);
    }
  }

  Record any_record() {
    Record r;
    r.kind = static_cast<RecordKind>(below(4));
    r.rank = below(3) ? below(1024) : static_cast<int>(u64());
    r.t = any_double();
    r.step = static_cast<int64_t>(u64() >> below(64)) * (coin() ? 1 : -1);
    auto maybe_d = [&](std::optional<double>& o) {
      if (below(4)) o = any_double();
    };
    auto maybe_i = [&](std::optional<int64_t>& o) {
      if (below(4)) o = static_cast<int64_t>(u64() >> below(64));
    };
    maybe_i(r.opt_step);
    for (auto* o : {&r.loss, &r.loss_avg, &r.lr, &r.grad_norm, &r.local_grad_norm, &r.grad_zero_frac, &r.param_norm,
                    &r.update_norm, &r.loss_scale, &r.step_ms, &r.comm_ms, &r.eval_loss})
      maybe_d(*o);
    if (below(4)) r.overflow = coin();
    if (below(4)) r.skipped = coin();
    if (below(4)) r.batch_hash = u64() >> below(64);
    maybe_i(r.epoch);
    maybe_i(r.samples_seen);
    maybe_i(r.param_mismatches);
    const char* texts[] = {"", "collective", "run_start", "world_size 8, scenario x (simulated)", "a \"quoted\" word",
                           "tab\there", "caf\xc3\xa9", "bad \xff byte", "back\\slash", "ctrl \x01"};
    if (below(3) == 0) r.phase = texts[below(10)];
    if (below(3) == 0) r.name = texts[below(10)];
    if (below(3) == 0) r.detail = texts[below(10)];
    return r;
  }

  // A JSON number of any shape (and some that are not JSON): digits 1..25, leading zeros, a fraction,
  // an exponent of any size and sign.
  std::string any_number() {
    std::string s;
    if (below(3) == 0) s += '-';
    if (below(6) == 0) s += '0';
    const int n = below(6) == 0 ? 1 + below(25) : 1 + below(19);
    for (int i = 0; i < n; ++i) s += static_cast<char>('0' + (i == 0 && below(8) ? 1 + below(9) : below(10)));
    if (coin()) {
      s += '.';
      const int f = below(10) == 0 ? below(2) : 1 + below(20);
      for (int i = 0; i < f; ++i) s += static_cast<char>('0' + below(10));
    }
    if (below(3) == 0) {
      s += "eE"[below(2)];
      if (coin()) s += "+-"[below(2)];
      const int e = below(5) == 0 ? below(6) : 1 + below(3);
      for (int i = 0; i < e; ++i) s += static_cast<char>('0' + below(10));
    }
    return s;
  }
};

TEST(JsonlParsers, TheWriterFormIsReadAsSimdjsonReadsIt) {
  Gen g;
  for (int i = 0; i < 100000; ++i) {
    const std::string line = to_json(g.any_record());
    const bool ascii_plain =
        line.find('\\') == std::string::npos &&
        std::none_of(line.begin(), line.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
    Record fast, general;
    ASSERT_EQ(parse_general(line, general), "") << line;
    // Every line of the writer without an escape or a non-ASCII byte is the one-pass parser's, but for
    // what it leaves to simdjson's own care: subnormal doubles and integers of 19 digits.
    const bool accepted = parse_writer_form(line, fast);
    if (accepted) {
      ASSERT_EQ(difference(fast, general), "") << line;
    }
    if (ascii_plain && !accepted) {
      bool rare = std::fpclassify(general.t) == FP_SUBNORMAL || general.step <= -1000000000000000000 ||
                  general.step >= 1000000000000000000;
      for (const auto* o : {&general.loss, &general.loss_avg, &general.lr, &general.grad_norm, &general.local_grad_norm,
                            &general.grad_zero_frac, &general.param_norm, &general.update_norm, &general.loss_scale,
                            &general.step_ms, &general.comm_ms, &general.eval_loss})
        rare |= *o && std::fpclassify(**o) == FP_SUBNORMAL;
      for (const auto* o : {&general.opt_step, &general.epoch, &general.samples_seen, &general.param_mismatches})
        rare |= *o && (**o <= -1000000000000000000 || **o >= 1000000000000000000);
      EXPECT_TRUE(rare) << "declined a plain writer line: " << line;
    }
  }
}

TEST(JsonlParsers, ATrainingRunsLinesAreAllTheOnePassParsers) {
  // What the harness writes (the values of a real step), all taken by the one-pass parser.
  Record r;
  r.rank = 3;
  r.t = 0.3406532420879685;
  r.step = 1;
  r.opt_step = 1;
  r.loss = 5.60386352112373;
  r.loss_avg = 5.542402056263998;
  r.lr = 3e-05;
  r.grad_norm = 2.044910796162442;
  r.local_grad_norm = 3.1432743315031724;
  r.grad_zero_frac = 0;
  r.param_norm = 18.2820567770697;
  r.update_norm = 0.0054846170331209095;
  r.loss_scale = 65536;
  r.overflow = false;
  r.skipped = false;
  r.batch_hash = 0xe8de6e55d900b300;
  r.epoch = 0;
  r.samples_seen = 16;
  r.step_ms = 340.590871912541;
  r.comm_ms = 28.22542014102146;
  r.param_mismatches = 0;
  EXPECT_TRUE(check(to_json(r)));
  Record h;
  h.kind = RecordKind::heartbeat;
  h.t = 0.9149068213024719;
  h.step = 3;
  h.phase = "compute";
  EXPECT_TRUE(check(to_json(h)));
  Record e;
  e.kind = RecordKind::event;
  e.name = "run_start";
  e.detail = "world_size 8, scenario fleet-healthy (simulated)";
  EXPECT_TRUE(check(to_json(e)));
  for (const char* nonfinite : {"\"nan\"", "\"NaN\"", "\"inf\"", "\"Infinity\"", "\"-inf\"", "\"-Infinity\"", "null"})
    EXPECT_TRUE(check(std::string(R"({"kind":"step","step":1,"loss":)") + nonfinite + "}")) << nonfinite;
}

TEST(JsonlParsers, NumbersOfEveryShapeInEveryKindOfField) {
  Gen g;
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::string num = g.any_number();
    const char* field[] = {"loss", "t", "step", "rank", "epoch", "overflow", "phase", "batch_hash", "kind"};
    const std::string f = field[g.below(9)];
    std::string line = f == "step" ? "{\"kind\":\"step\",\"step\":" + num + "}"
                                   : "{\"kind\":\"step\",\"step\":1,\"" + f + "\":" + num + "}";
    accepted += check(line);
  }
  EXPECT_GT(accepted, 30000);  // not a parser that declines everything
}

TEST(JsonlParsers, EditedLinesAreReadAsSimdjsonReadsThemOrDeclined) {
  Gen g;
  const std::string alphabet = std::string("{}[]\":,.-+eE0123456789 \t\r\\/ntrufalsxyzINFa") + '\x01' + '\x7f' +
                               "\xc3\xa9\xff";
  int accepted = 0, edited_and_accepted = 0;
  for (int i = 0; i < 100000; ++i) {
    Record r = g.any_record();
    r.detail.clear();  // (plain lines: the edits are then the only oddity)
    const std::string line = to_json(r);
    std::string edit = line;
    const int edits = 1 + g.below(3);
    for (int k = 0; k < edits && !edit.empty(); ++k) {
      const size_t at = static_cast<size_t>(g.below(static_cast<int>(edit.size())));
      const char c = alphabet[static_cast<size_t>(g.below(static_cast<int>(alphabet.size())))];
      switch (g.below(4)) {
        case 0: edit[at] = c; break;
        case 1: edit.insert(edit.begin() + static_cast<long>(at), c); break;
        case 2: edit.erase(at, 1); break;
        default: edit.resize(at); break;
      }
    }
    const bool ok = check(edit);
    accepted += ok;
    edited_and_accepted += ok && edit != line;
  }
  EXPECT_GT(edited_and_accepted, 1000);  // edits that keep the line valid (a digit for a digit, ...) were read
  EXPECT_GT(accepted, edited_and_accepted);
}

TEST(JsonlParsers, DeclinesWhatOnlyTheGeneralParserDecides) {
  // Each of these is valid and read by simdjson, or malformed and named by it: the one-pass parser
  // leaves them all to it.
  for (const char* line : {
           R"( {"kind":"step","step":1})",                 // whitespace
           R"({"kind":"step","step":1} )",
           "{\"kind\":\"step\",\"step\":1}\r",
           R"({"kind" : "step","step":1})",
           R"({"kind":"st\u0065p","step":1})",              // an escape
           R"({"kind":"step","step":1,"future":{"a":1}})",  // an unknown key, a nested value
           R"({"kind":"step","step":1,"step":2})",          // a repeated key
           R"({"kind":"step","step":1.0})",                 // an integral float where an integer goes
           R"({"kind":"step","step":1,"overflow":1})",      // a number for a flag
           R"({"kind":"step","step":1,"loss":1e400})",      // out of range
           R"({"kind":"step","step":1,"loss":4.9e-324})",   // subnormal
           R"({"kind":"step","step":01})",                  // malformed
           R"({"kind":"step","step":1,"loss":"high"})",
           R"({"kind":"bogus","step":1})",
           R"({"kind":"step"})",
           R"({"kind":"step","step":1,"batch_hash":"xyz"})",
           R"({"kind":"step","step":1,"loss":nul})",
           R"({"kind":"step","step":1,})",
           R"([1,2])",
           "{\"kind\":\"step\",\"step\":1,\"phase\":\"caf\xc3\xa9\"}",
       }) {
    Record r;
    EXPECT_FALSE(parse_writer_form(line, r)) << line;
  }
}

}  // namespace
}  // namespace flatline
