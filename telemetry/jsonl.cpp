// JSONL codec for Record. Writing is hand-rolled with fmt for a fixed field order and shortest
// round-trip doubles (nlohmann only escapes strings). Parsing: a line in the writer's own form in one
// pass (below, "the writer's own form"); any other line with simdjson's On-Demand API (Debian
// libsimdjson-dev 3.0): one parser reused for every line, the fields dispatched in the order the
// writer puts them, no intermediate DOM.
#include "telemetry/jsonl.h"

#include <sys/stat.h>

#include "core/input_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <simdjson.h>

namespace flatline {

const char* to_string(RecordKind k) {
  switch (k) {
    case RecordKind::step: return "step";
    case RecordKind::heartbeat: return "heartbeat";
    case RecordKind::event: return "event";
    case RecordKind::eval: return "eval";
  }
  return "?";
}

ParseError::ParseError(const std::string& f, size_t l, const std::string& what)
    : std::runtime_error(f + ":" + std::to_string(l) + ": " + what), file(f), line(l) {}

namespace {

// JSON has no inf/nan; we write them as strings so a reader can tell them apart from missing.
void put_double(std::string& s, const char* key, double v) {
  if (std::isfinite(v)) {
    fmt::format_to(std::back_inserter(s), ",\"{}\":{}", key, v);
  } else {
    fmt::format_to(std::back_inserter(s), ",\"{}\":\"{}\"", key,
                   std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
  }
}
void put(std::string& s, const char* key, const std::optional<double>& v) {
  if (v) put_double(s, key, *v);
}
void put(std::string& s, const char* key, const std::optional<int64_t>& v) {
  if (v) fmt::format_to(std::back_inserter(s), ",\"{}\":{}", key, *v);
}
void put(std::string& s, const char* key, const std::optional<bool>& v) {
  if (v) fmt::format_to(std::back_inserter(s), ",\"{}\":{}", key, *v ? "true" : "false");
}
void put_str(std::string& s, const char* key, const std::string& v) {
  // Invalid UTF-8 (an error message quoting raw bytes) is replaced, not thrown: the writer must not fail.
  if (!v.empty())
    fmt::format_to(std::back_inserter(s), ",\"{}\":{}", key,
                   nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

std::string to_json(const Record& r) {
  std::string s;
  s.reserve(400);
  fmt::format_to(std::back_inserter(s), "{{\"kind\":\"{}\",\"rank\":{}", to_string(r.kind), r.rank);
  put_double(s, "t", r.t);
  fmt::format_to(std::back_inserter(s), ",\"step\":{}", r.step);
  put(s, "opt_step", r.opt_step);
  put(s, "loss", r.loss);
  put(s, "loss_avg", r.loss_avg);
  put(s, "lr", r.lr);
  put(s, "grad_norm", r.grad_norm);
  put(s, "local_grad_norm", r.local_grad_norm);
  put(s, "grad_zero_frac", r.grad_zero_frac);
  put(s, "param_norm", r.param_norm);
  put(s, "update_norm", r.update_norm);
  put(s, "loss_scale", r.loss_scale);
  put(s, "overflow", r.overflow);
  put(s, "skipped", r.skipped);
  if (r.batch_hash) fmt::format_to(std::back_inserter(s), ",\"batch_hash\":\"{:016x}\"", *r.batch_hash);
  put(s, "epoch", r.epoch);
  put(s, "samples_seen", r.samples_seen);
  put(s, "step_ms", r.step_ms);
  put(s, "comm_ms", r.comm_ms);
  put(s, "param_mismatches", r.param_mismatches);
  put_str(s, "phase", r.phase);
  put_str(s, "name", r.name);
  put_str(s, "detail", r.detail);
  put(s, "eval_loss", r.eval_loss);
  s += '}';
  return s;
}

}  // namespace flatline

// --- parsing ----------------------------------------------------------------------------------------
// simdjson's On-Demand API runs the implementation fixed at compile time (simdjson::builtin): this
// file is built with the host's AVX2/BMI/PCLMUL/LZCNT when the build host has them (CMakeLists.txt,
// FLATLINE_JSON_SIMD), else simdjson's portable fallback (same results, slower).
namespace flatline {
namespace {

namespace od = simdjson::ondemand;
namespace sj = ::simdjson;


// The fields of a record in the order to_json() writes them (and parse errors are reported in).
enum Field : int {
  fKind, fRank, fT, fStep, fOptStep, fLoss, fLossAvg, fLr, fGradNorm, fLocalGradNorm, fGradZeroFrac, fParamNorm,
  fUpdateNorm, fLossScale, fOverflow, fSkipped, fBatchHash, fEpoch, fSamplesSeen, fStepMs, fCommMs, fParamMismatches,
  fPhase, fName, fDetail, fEvalLoss, kFields, fUnknown = kFields
};
constexpr std::string_view kNames[kFields] = {
    "kind",       "rank",       "t",          "step",     "opt_step",  "loss",          "loss_avg",
    "lr",         "grad_norm",  "local_grad_norm", "grad_zero_frac", "param_norm", "update_norm", "loss_scale",
    "overflow",   "skipped",    "batch_hash", "epoch",    "samples_seen", "step_ms",    "comm_ms",
    "param_mismatches", "phase", "name",      "detail",     "eval_loss"};

// A key compared as two 64-bit words (its name, the rest masked off) and its closing quote. Every name
// is at most 16 bytes, and a key of the line has SIMDJSON_PADDING readable bytes after it, so the 17
// bytes at a key are always readable (a library memcmp per key was 6% of the reader's time).
struct KeyWords {
  uint64_t w[2] = {0, 0}, mask[2] = {0, 0};
  size_t len = 0;
};
constexpr KeyWords key_words(std::string_view name) {
  KeyWords k;
  k.len = name.size();
  for (size_t i = 0; i < name.size(); ++i) {
    k.w[i / 8] |= uint64_t{static_cast<unsigned char>(name[i])} << (8 * (i % 8));
    k.mask[i / 8] |= uint64_t{0xff} << (8 * (i % 8));
  }
  return k;
}
constexpr auto kKeyWords = [] {
  std::array<KeyWords, kFields> k{};
  for (int i = 0; i < kFields; ++i) {
    if (kNames[i].size() > 16) throw "a field name longer than 16 bytes";  // (not a constant expression)
    k[static_cast<size_t>(i)] = key_words(kNames[i]);
  }
  return k;
}();

inline uint64_t load64(const char* p) {  // little-endian words, as key_words() builds them
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}
inline bool key_is(const char* raw, const KeyWords& k) {
  return (((load64(raw) ^ k.w[0]) & k.mask[0]) | ((load64(raw + 8) ^ k.w[1]) & k.mask[1])) == 0 && raw[k.len] == '"';
}

// Lines come from the writer in a fixed order: try where the last key left off first. Keys are
// compared raw (not unescaped: none of ours has an escape; an escaped spelling is an unknown key).
Field field_of(od::raw_json_string key, int& next) {
  const char* raw = key.raw();
  if (next < kFields && key_is(raw, kKeyWords[static_cast<size_t>(next)])) return static_cast<Field>(next++);
  for (int i = 0; i < kFields; ++i)
    if (key_is(raw, kKeyWords[static_cast<size_t>(i)])) {
      next = i + 1;
      return static_cast<Field>(i);
    }
  return fUnknown;
}

// The first error in field order wins (as if the fields were checked one by one in that order).
struct Errors {
  int at = 1 << 30;
  std::string msg;
  void set(int order, std::string m) {
    if (order < at) at = order, msg = std::move(m);
  }
};

// The value's JSON text, for error messages.
std::string raw(od::value& v) {
  od::json_type type;
  std::string_view t;
  if (!v.type().get(type)) {
    if (type == od::json_type::object) {
      od::object o;
      if (!v.get_object().get(o) && !o.raw_json().get(t)) return std::string(t);
      return "{...}";
    }
    if (type == od::json_type::array) {
      od::array a;
      if (!v.get_array().get(a) && !a.raw_json().get(t)) return std::string(t);
      return "[...]";
    }
  }
  t = v.raw_json_token();
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t' || t.back() == '\r' || t.back() == '\n')) t.remove_suffix(1);
  return std::string(t);
}

// The value types of a record (telemetry/jsonl.h: inf and nan are written as strings).
bool as_double(od::value& v, std::optional<double>& out, std::string& why) {
  double d;
  if (!v.get_double().get(d)) return out = d, true;  // the common case first
  od::json_type type;
  if (v.type().get(type)) return false;
  if (type == od::json_type::null) return true;
  if (type == od::json_type::string) {
    std::string_view s;
    if (!v.get_string().get(s)) {
      if (s == "nan" || s == "NaN") return out = std::numeric_limits<double>::quiet_NaN(), true;
      if (s == "inf" || s == "Infinity") return out = std::numeric_limits<double>::infinity(), true;
      if (s == "-inf" || s == "-Infinity") return out = -std::numeric_limits<double>::infinity(), true;
      why = "\"" + std::string(s) + "\"";
      return false;
    }
  }
  why = raw(v);
  return false;
}
bool as_int(od::value& v, std::optional<int64_t>& out, std::string& why) {
  int64_t i;
  if (!v.get_int64().get(i)) return out = i, true;
  od::json_type type;
  if (v.type().get(type)) return false;
  if (type == od::json_type::null) return true;
  if (type == od::json_type::number) {
    double d;
    if (!v.get_double().get(d) && std::floor(d) == d && std::fabs(d) < 9e15) return out = static_cast<int64_t>(d), true;
  }
  why = raw(v);
  return false;
}
bool as_bool(od::value& v, std::optional<bool>& out, std::string& why) {
  od::json_type type;
  if (v.type().get(type)) return false;
  if (type == od::json_type::null) return true;
  if (type == od::json_type::boolean) {
    bool b;
    if (!v.get_bool().get(b)) return out = b, true;
  } else if (type == od::json_type::number) {
    int64_t i;
    if (!v.get_int64().get(i)) return out = i != 0, true;
  }
  why = raw(v);
  return false;
}
// A string value, unescaped in the parser's buffer (valid until its next document).
bool as_view(od::value& v, std::string_view& out, bool& present, std::string& why) {
  od::json_type type;
  if (v.type().get(type)) return false;
  if (type == od::json_type::null) return true;
  if (type == od::json_type::string && !v.get_string().get(out)) return present = true;
  why = raw(v);
  return false;
}
bool as_string(od::value& v, std::string& out, bool& present, std::string& why) {
  std::string_view s;
  bool p = false;
  if (!as_view(v, s, p, why)) return false;
  if (p) out.assign(s.data(), s.size()), present = true;
  return true;
}

// The value of each hex digit; 16 for any other byte.
constexpr auto kHex = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c)
    t[static_cast<size_t>(c)] = c >= '0' && c <= '9' ? static_cast<uint8_t>(c - '0')
                                : c >= 'a' && c <= 'f' ? static_cast<uint8_t>(c - 'a' + 10)
                                : c >= 'A' && c <= 'F' ? static_cast<uint8_t>(c - 'A' + 10)
                                                       : uint8_t{16};
  return t;
}();

// Up to 16 hex digits, nothing else (strtoull alone would also take "-1" as 2^64 - 1, "0x..." and
// leading spaces): false for anything else. Without a branch per digit (random hex digits made one
// mispredict half the time).
bool hex64(std::string_view s, uint64_t& out) {
  if (s.size() > 16) return false;
  uint64_t v = 0;
  unsigned bad = 0;
  for (const char c : s) {
    const unsigned d = kHex[static_cast<unsigned char>(c)];
    bad |= d;
    v = (v << 4) | (d & 15);
  }
  if (bad & 16) return false;
  out = v;
  return true;
}

// A document that is not an object: valid JSON of another type ("expected a JSON object"), or not JSON.
bool valid_non_object(od::document& doc) {
  od::json_type type;
  if (doc.type().get(type)) return false;
  bool ok = false;
  switch (type) {
    case od::json_type::array: {
      od::array a;
      if (doc.get_array().get(a)) return false;
      ok = true;
      for (auto el : a) ok &= !el.error();
      break;
    }
    case od::json_type::number: { double d; ok = !doc.get_double().get(d); break; }
    case od::json_type::string: { std::string_view v; ok = !doc.get_string().get(v); break; }
    case od::json_type::boolean: { bool b; ok = !doc.get_bool().get(b); break; }
    case od::json_type::null: { bool n = false; ok = !doc.is_null().get(n) && n; break; }
    default: return false;
  }
  const char* rest = nullptr;
  return ok && doc.current_location().get(rest) != sj::SUCCESS;
}

// --- the writer's own form, in one pass ------------------------------------------------------------
// to_json() writes one object on one line, without whitespace, escapes or nesting, and so does the
// Python probe (python/flatline_probe/telemetry.py: json.dumps with compact separators, keys in its own
// order, non-ASCII escaped). Such a line is parsed here in a single pass over its bytes, with no
// structural index and no document iterator: profiled reading an 8-rank run (bench/README.md), the
// per-line stage 1 of simdjson, its document iteration, its number parsing and the dispatch of fields
// on top were ~60% of the reader's time. The pass accepts exactly this form:
//   '{' "key":value (',' "key":value)* '}'   (nothing before or after; each of our keys at most once)
//   value: a JSON number (RFC 8259 §6), true, false, null, or a string of printable ASCII without
//   backslash, as the field's type wants it (a number, or "nan"/"inf"/... for a double field; an
//   integer token for an integer field; true/false for a flag).
// Anything else (whitespace, an escape, a byte >= 0x80, an unknown or repeated key, a nested value, a
// number this pass does not convert exactly, any error) is handed to the general parser below, which
// decides it as before: the records, the warnings and their wording are the general parser's.
// tests/telemetry/jsonl_parsers_test.cpp holds the two to the same Records, field by field and bit by bit.

enum class FieldType : uint8_t { kind, integer, number, flag, hash, text };
constexpr FieldType type_of(Field id) {
  switch (id) {
    case fKind: return FieldType::kind;
    case fRank: case fStep: case fOptStep: case fEpoch: case fSamplesSeen: case fParamMismatches: return FieldType::integer;
    case fOverflow: case fSkipped: return FieldType::flag;
    case fBatchHash: return FieldType::hash;
    case fPhase: case fName: case fDetail: return FieldType::text;
    default: return FieldType::number;
  }
}

inline bool is_digit(char c) { return static_cast<unsigned char>(c - '0') < 10; }

// 10^n as an integer, n <= 8.
constexpr uint64_t kPow10u[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

// Appends the digits at p (at most `most` of them) to m (m * 10^n + their value), p past them;
// returns n. Eight bytes at a time where eight are readable: the run of digits they start with is
// found from the bytes that are not digits, and converted with the SWAR steps of simdjson and
// fast_float (Lemire, "Number Parsing at a Gigabyte per Second", 2021), the bytes after it shifted
// out (a byte-at-a-time loop over the 15-17 digits of a shortest round-trip double was the largest
// cost left).
inline int take_digits(const char*& p, const char* end, uint64_t& m, int most) {
  int n = 0;
  while (end - p >= 8 && n < most) {
    const uint64_t w = load64(p);
    // The high bit of each byte that is not '0'..'9' (a byte's carry or borrow reaches only the
    // bytes after it: the first such byte is found exactly).
    const uint64_t other = ((w + 0x4646464646464646) | (w - 0x3030303030303030)) & 0x8080808080808080;
    const int k = std::min(other ? __builtin_ctzll(other) / 8 : 8, most - n);
    if (k == 0) return n;
    uint64_t v = (w - 0x3030303030303030) << (8 * (8 - k));  // the k digits, zeros before them
    v = (v * 10) + (v >> 8);
    v = (((v & 0x000000FF000000FF) * (100 + (1000000ULL << 32))) + (((v >> 16) & 0x000000FF000000FF) * (1 + (10000ULL << 32)))) >> 32;
    m = m * kPow10u[k] + v;
    p += k;
    n += k;
    if (k < 8) return n;
  }
  while (n < most && p < end && is_digit(*p)) m = m * 10 + static_cast<uint64_t>(*p++ - '0'), ++n;
  return n;
}

// A JSON number at p (the grammar of RFC 8259 §6: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), p past
// it, converted by simdjson's own conversion (compute_float_64: Clinger's fast path, else Eisel-Lemire),
// the one its get_double() ends in: the same bits. false: not that grammar, or a number left to the
// general parser (more than 19 significant digits, an exponent of more than 4 digits, out of simdjson's
// fast range, a subnormal result).
bool number(const char*& p, const char* end, double& out) {
  const bool neg = p < end && *p == '-';
  p += neg;
  const char* const first = p;
  uint64_t m = 0;  // the significant digits (at most 19: no overflow)
  int sig = 0, frac = 0;
  if (p < end && *p == '0') {
    ++p;
  } else if (p < end && is_digit(*p)) {
    do m = m * 10 + static_cast<uint64_t>(*p++ - '0');  // (mostly 1-3 digits: a loop is quicker)
    while (p < end && is_digit(*p) && p - first < 19);
    sig = static_cast<int>(p - first);
  } else {
    return false;
  }
  if (p < end && is_digit(*p)) return false;  // a leading zero, or 20 digits
  if (p < end && *p == '.') {
    const char* const f = ++p;
    if (m == 0)
      while (p < end && *p == '0') ++p;  // zeros before the first significant digit
    sig += take_digits(p, end, m, 19 - sig);
    if (p < end && is_digit(*p)) return false;  // a 20th significant digit
    frac = static_cast<int>(p - f);
    if (frac == 0) return false;
  }
  int e = 0;
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    const bool eneg = p < end && (*p == '-' || *p == '+') ? *p++ == '-' : false;
    const char* d = p;
    while (p < end && is_digit(*p) && p - d < 5) e = e * 10 + (*p++ - '0');
    if (p == d || p - d > 4) return false;
    if (eneg) e = -e;
  }
  e -= frac;
  if (e < sj::internal::smallest_power || e > sj::internal::largest_power) return false;
  double v;
  if (!sj::builtin::numberparsing::compute_float_64(e, m, neg, v)) return false;
  if (m != 0 && !std::isnormal(v)) return false;
  out = v;
  return true;
}

// An integer token (no fraction, no exponent, at most 18 digits: always an int64).
bool integer(const char*& p, const char* end, int64_t& out) {
  const bool neg = p < end && *p == '-';
  p += neg;
  if (p == end || !is_digit(*p)) return false;
  int64_t v = 0;
  if (*p == '0') {
    ++p;
  } else {
    const char* d = p;
    while (p < end && is_digit(*p) && p - d < 18) v = v * 10 + (*p++ - '0');
  }
  if (p < end && is_digit(*p)) return false;  // a leading zero or a 19th digit
  out = neg ? -v : v;
  return true;
}

// A string of printable ASCII without backslash, p at its opening quote; the view is of the line.
bool plain_string(const char*& p, const char* end, std::string_view& out) {
  if (p == end || *p != '"') return false;
  const char* s = ++p;
  while (p < end && *p != '"') {
    const auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c == '\\' || c >= 0x80) return false;
    ++p;
  }
  if (p == end) return false;
  out = std::string_view(s, static_cast<size_t>(p - s));
  ++p;
  return true;
}

bool literal(const char*& p, const char* end, std::string_view word) {
  if (static_cast<size_t>(end - p) < word.size() || std::memcmp(p, word.data(), word.size()) != 0) return false;
  p += word.size();
  return true;
}

// The field whose key starts at p (past its opening quote) and ends with '":', or fUnknown.
Field key_at(const char* p, const char* end, int& next) {
  const auto fits = [&](int i) {
    const KeyWords& k = kKeyWords[static_cast<size_t>(i)];
    if (end - p < static_cast<ptrdiff_t>(k.len) + 2) return false;
    if (end - p >= 16) {
      if (!key_is(p, k)) return false;
    } else if (std::memcmp(p, kNames[i].data(), k.len) != 0 || p[k.len] != '"') {
      return false;
    }
    return p[k.len + 1] == ':';
  };
  if (next < kFields && fits(next)) return static_cast<Field>(next++);
  for (int i = 0; i < kFields; ++i)
    if (fits(i)) {
      next = i + 1;
      return static_cast<Field>(i);
    }
  return fUnknown;
}

std::optional<double>* number_field(Record& r, Field id) {
  switch (id) {
    case fLoss: return &r.loss;
    case fLossAvg: return &r.loss_avg;
    case fLr: return &r.lr;
    case fGradNorm: return &r.grad_norm;
    case fLocalGradNorm: return &r.local_grad_norm;
    case fGradZeroFrac: return &r.grad_zero_frac;
    case fParamNorm: return &r.param_norm;
    case fUpdateNorm: return &r.update_norm;
    case fLossScale: return &r.loss_scale;
    case fStepMs: return &r.step_ms;
    case fCommMs: return &r.comm_ms;
    case fEvalLoss: return &r.eval_loss;
    default: return nullptr;
  }
}
std::optional<int64_t>* integer_field(Record& r, Field id) {
  switch (id) {
    case fOptStep: return &r.opt_step;
    case fEpoch: return &r.epoch;
    case fSamplesSeen: return &r.samples_seen;
    case fParamMismatches: return &r.param_mismatches;
    default: return nullptr;
  }
}

// The writer's form at p (an object ending before `end`) into a default Record: returns the end of the
// object (past its '}'), or nullptr (r then unspecified) for anything else. A line break is never part
// of the form, so reading a buffer of lines it stops within the line it started on.
const char* writer_form(const char* p, const char* const end, Record& r) {
  if (p == end || *p != '{') return nullptr;
  ++p;
  uint32_t seen = 0;
  int next = 0;
  std::string_view kind, bh;
  bool has_kind = false, has_bh = false;
  std::optional<int64_t> rank, step;
  std::optional<double> t;
  for (;;) {
    if (p == end || *p != '"') return nullptr;
    ++p;
    const Field id = key_at(p, end, next);
    if (id == fUnknown || (seen >> id & 1u)) return nullptr;
    seen |= 1u << id;
    p += kKeyWords[static_cast<size_t>(id)].len + 2;
    if (p < end && *p == 'n') {
      if (!literal(p, end, "null")) return nullptr;
    } else {
      switch (type_of(id)) {
        case FieldType::number: {
          std::optional<double>& out = id == fT ? t : *number_field(r, id);
          double v;
          if (p < end && *p == '"') {
            std::string_view s;
            if (!plain_string(p, end, s)) return nullptr;
            if (s == "nan" || s == "NaN") v = std::numeric_limits<double>::quiet_NaN();
            else if (s == "inf" || s == "Infinity") v = std::numeric_limits<double>::infinity();
            else if (s == "-inf" || s == "-Infinity") v = -std::numeric_limits<double>::infinity();
            else return nullptr;
          } else if (!number(p, end, v)) {
            return nullptr;
          }
          out = v;
          break;
        }
        case FieldType::integer: {
          int64_t v;
          if (!integer(p, end, v)) return nullptr;
          (id == fRank ? rank : id == fStep ? step : *integer_field(r, id)) = v;
          break;
        }
        case FieldType::flag: {
          bool v;
          if (literal(p, end, "true")) v = true;
          else if (literal(p, end, "false")) v = false;
          else return nullptr;
          (id == fOverflow ? r.overflow : r.skipped) = v;
          break;
        }
        case FieldType::kind:
          if (!plain_string(p, end, kind)) return nullptr;
          has_kind = true;
          break;
        case FieldType::hash:
          if (!plain_string(p, end, bh)) return nullptr;
          has_bh = true;
          break;
        case FieldType::text: {
          std::string_view s;
          if (!plain_string(p, end, s)) return nullptr;
          (id == fPhase ? r.phase : id == fName ? r.name : r.detail).assign(s.data(), s.size());
          break;
        }
      }
    }
    if (p == end) return nullptr;
    if (*p == ',') {
      ++p;
      continue;
    }
    if (*p++ != '}') return nullptr;
    break;
  }
  if (!has_kind) return nullptr;
  if (kind == "step") r.kind = RecordKind::step;
  else if (kind == "heartbeat") r.kind = RecordKind::heartbeat;
  else if (kind == "event") r.kind = RecordKind::event;
  else if (kind == "eval") r.kind = RecordKind::eval;
  else return nullptr;
  if (!step) return nullptr;
  if (has_bh) {
    uint64_t h = 0;
    if (!hex64(bh, h)) return nullptr;
    if (!bh.empty()) r.batch_hash = h;
  }
  r.rank = static_cast<int>(rank.value_or(0));
  r.t = t.value_or(std::numeric_limits<double>::quiet_NaN());
  r.step = *step;
  return p;
}

bool parse_writer_form(std::string_view line, Record& r) {
  return writer_form(line.data(), line.data() + line.size(), r) == line.data() + line.size();
}

// One parser per thread, reused for every line (its buffers grow to the longest line and stay).
struct LineCodec {
  od::parser parser;
  
  // Parses `json` (inside a buffer with SIMDJSON_PADDING readable bytes after its end) into a default
  // Record r. Returns "" or the error message (without file:line).
  std::string parse(sj::padded_string_view json, Record& r) {
    if (parse_writer_form(std::string_view(json.data(), json.length()), r)) return {};
    r = Record();
    return parse_general(json, r);
  }

  // Any line: simdjson On-Demand.
  std::string parse_general(sj::padded_string_view json, Record& r) {
    od::document doc;
    if (parser.iterate(json).get(doc)) return "not valid JSON";
    od::object obj;
    if (doc.get_object().get(obj)) return valid_non_object(doc) ? "expected a JSON object" : "not valid JSON";
    Errors err;
    std::string why;
    std::string_view kind, bh;  // in the parser's buffer
    bool has_kind = false, has_bh = false;
    std::optional<int64_t> rank, step;
    std::optional<double> t;
    int next = 0;
    for (auto fr : obj) {
      if (fr.error()) return "not valid JSON";
      od::field& f = fr.value_unsafe();  // a reference, as for the value below
      const Field id = field_of(f.key(), next);
      if (id == fUnknown) continue;  // newer writers may add fields; skipped unread
      od::value& v = f.value();  // a reference: copying a value costs a store-forwarding stall
      bool ok = true;
      const int order = 2 * id;
      switch (id) {
        case fKind: ok = as_view(v, kind, has_kind, why); break;
        case fRank: ok = as_int(v, rank, why); break;
        case fT: ok = as_double(v, t, why); break;
        case fStep: ok = as_int(v, step, why); break;
        case fOptStep: ok = as_int(v, r.opt_step, why); break;
        case fLoss: ok = as_double(v, r.loss, why); break;
        case fLossAvg: ok = as_double(v, r.loss_avg, why); break;
        case fLr: ok = as_double(v, r.lr, why); break;
        case fGradNorm: ok = as_double(v, r.grad_norm, why); break;
        case fLocalGradNorm: ok = as_double(v, r.local_grad_norm, why); break;
        case fGradZeroFrac: ok = as_double(v, r.grad_zero_frac, why); break;
        case fParamNorm: ok = as_double(v, r.param_norm, why); break;
        case fUpdateNorm: ok = as_double(v, r.update_norm, why); break;
        case fLossScale: ok = as_double(v, r.loss_scale, why); break;
        case fOverflow: ok = as_bool(v, r.overflow, why); break;
        case fSkipped: ok = as_bool(v, r.skipped, why); break;
        case fBatchHash: ok = as_view(v, bh, has_bh, why); break;
        case fEpoch: ok = as_int(v, r.epoch, why); break;
        case fSamplesSeen: ok = as_int(v, r.samples_seen, why); break;
        case fStepMs: ok = as_double(v, r.step_ms, why); break;
        case fCommMs: ok = as_double(v, r.comm_ms, why); break;
        case fParamMismatches: ok = as_int(v, r.param_mismatches, why); break;
        case fPhase: { bool p = false; ok = as_string(v, r.phase, p, why); break; }
        case fName: { bool p = false; ok = as_string(v, r.name, p, why); break; }
        case fDetail: { bool p = false; ok = as_string(v, r.detail, p, why); break; }
        case fEvalLoss: ok = as_double(v, r.eval_loss, why); break;
        default: break;
      }
      if (!ok) {
        if (why.empty()) return "not valid JSON";  // the value itself did not parse
        const char* expected = id == fKind || id == fBatchHash || id == fPhase || id == fName || id == fDetail
                                   ? "a string"
                               : id == fOverflow || id == fSkipped                                    ? "true/false"
                               : id == fRank || id == fStep || id == fOptStep || id == fEpoch || id == fSamplesSeen ||
                                         id == fParamMismatches
                                   ? "an integer"
                                   : "a number";
        err.set(order, fmt::format("field '{}': expected {}, got {}", kNames[id], expected, why));
        why.clear();
      }
    }
    const char* rest = nullptr;
    if (!doc.current_location().get(rest)) return "not valid JSON";  // trailing content after the object
    if (kind == "step") r.kind = RecordKind::step;
    else if (kind == "heartbeat") r.kind = RecordKind::heartbeat;
    else if (kind == "event") r.kind = RecordKind::event;
    else if (kind == "eval") r.kind = RecordKind::eval;
    else err.set(2 * fKind + 1, "field 'kind': expected step|heartbeat|event|eval, got '" + std::string(kind) + "'");
    if (!step) err.set(2 * fStep + 1, "missing field 'step'");
    if (has_bh) {
      uint64_t h = 0;
      if (!hex64(bh, h))
        err.set(2 * fBatchHash + 1, "field 'batch_hash': expected up to 16 hex digits, got '" + std::string(bh) + "'");
      else if (!bh.empty())
        r.batch_hash = h;
    }
    if (!err.msg.empty()) return err.msg;
    r.rank = static_cast<int>(rank.value_or(0));
    r.t = t.value_or(std::numeric_limits<double>::quiet_NaN());
    r.step = *step;
    return {};
  }
};

// One parser per thread, reused for every line (its buffers grow to the longest line and stay).
LineCodec& line_codec() {
  thread_local LineCodec c;
  return c;
}

}  // namespace

bool binary_line(std::string_view line) {
  for (unsigned char c : line)
    if (c < 0x20 && c != '\t' && c != 0x1b && c != '\r') return true;
  return false;
}

namespace {
// `line` in a padded buffer (simdjson reads up to SIMDJSON_PADDING bytes past it), one per thread.
sj::padded_string_view padded_copy(std::string_view line) {
  thread_local simdjson::padded_string copy;
  if (copy.size() < line.size()) copy = simdjson::padded_string(line.size() * 2 + 64);
  std::memcpy(copy.data(), line.data(), line.size());
  return sj::padded_string_view(copy.data(), line.size(), copy.size() + simdjson::SIMDJSON_PADDING);
}
}  // namespace

Record parse_record(std::string_view line, const std::string& file, size_t line_no) {
  Record r;
  if (parse_writer_form(line, r)) return r;  // (needs no padding)
  r = Record();
  std::string e = line_codec().parse_general(padded_copy(line), r);
  if (!e.empty()) throw ParseError(file, line_no, e);
  return r;
}

bool jsonl_detail::parse_writer_form(std::string_view line, Record& r) { return flatline::parse_writer_form(line, r); }

std::string jsonl_detail::parse_general(std::string_view line, Record& r) {
  return line_codec().parse_general(padded_copy(line), r);
}

namespace {

// The complete lines of base[0, n) (a buffer with `cap` >= n + SIMDJSON_PADDING readable bytes),
// appended to `out`; returns the bytes consumed and adds the lines consumed to *lines.
size_t parse_padded(const char* base, size_t n, size_t cap, const std::string& file, size_t first_line, bool final,
                    std::vector<Record>& out, std::vector<std::string>* warnings, size_t* lines) {
  // Room for every record: the line count estimated from the first 64 KiB (counting them all would
  // be one more pass over the input).
  const size_t sample = std::min<size_t>(n, 1 << 16);
  size_t sample_lines = 1;
  for (const char* p = base; (p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(base + sample - p))));
       ++p)
    ++sample_lines;
  // Grown by half at least when it must grow: a file read whole appends chunk after chunk to one vector.
  const size_t need = out.size() + static_cast<size_t>(static_cast<double>(n) / static_cast<double>(sample + 1) * sample_lines * 1.05) + 16;
  if (need > out.capacity()) out.reserve(std::max(need, out.capacity() + out.capacity() / 2));
  LineCodec& codec = line_codec();
  size_t pos = 0, line_no = first_line - 1;
  while (pos < n) {
    {
      // A line of the writer's form ends where the form does: no search for its newline.
      Record& r = out.emplace_back();
      const char* stop = writer_form(base + pos, base + n, r);
      if (stop && stop < base + n && *stop == '\n') {
        ++line_no;
        pos = static_cast<size_t>(stop - base) + 1;
        continue;
      }
      out.pop_back();
    }
    const char* nl = static_cast<const char*>(std::memchr(base + pos, '\n', n - pos));
    if (!nl) {
      if (final && warnings)
        warnings->push_back(
            fmt::format("{}:{}: last line has no newline (half-written?), {} bytes ignored", file, line_no + 1, n - pos));
      break;
    }
    ++line_no;
    const size_t len = static_cast<size_t>(nl - (base + pos));
    std::string_view line(base + pos, len);
    const size_t start = pos;
    pos += len + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Record& r = out.emplace_back();
    std::string e = codec.parse_general(simdjson::padded_string_view(base + start, len, cap - start), r);  // (not the form)
    if (!e.empty()) {
      out.pop_back();
      if (warnings) {
        if (binary_line(line)) warnings->push_back(fmt::format("{}:{}: binary data ({} bytes), line skipped", file, line_no, len));
        else warnings->push_back(fmt::format("{}:{}: {}", file, line_no, e));
      }
    }
  }
  *lines += line_no - (first_line - 1);
  return pos;
}

}  // namespace

size_t parse_jsonl_chunk(std::string_view data, const std::string& file, size_t first_line, bool final,
                         std::vector<Record>& out, std::vector<std::string>* warnings) {
  // The input in a padded buffer (simdjson reads up to SIMDJSON_PADDING bytes past a line): one per
  // thread, kept at the largest size seen, so reading many files does not fault in fresh pages.
  thread_local std::vector<char> buf;
  if (buf.size() < data.size() + simdjson::SIMDJSON_PADDING) buf.resize(data.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(buf.data(), data.data(), data.size());
  std::memset(buf.data() + data.size(), 0, simdjson::SIMDJSON_PADDING);
  size_t lines = 0;
  return parse_padded(buf.data(), data.size(), buf.size(), file, first_line, final, out, warnings, &lines);
}

std::vector<Record> parse_jsonl(std::string_view data, const std::string& file, std::vector<std::string>* warnings) {
  std::vector<Record> out;
  parse_jsonl_chunk(data, file, 1, true, out, warnings);
  return out;
}

JsonlReader::JsonlReader(std::string path, size_t chunk) : path_(std::move(path)), chunk_(std::max<size_t>(chunk, 4096)) {
  f_ = fopen_input(path_, kMaxLogFileBytes, "a telemetry file");
}
JsonlReader::~JsonlReader() {
  if (f_) std::fclose(f_);
}

bool JsonlReader::next(std::vector<Record>& out, std::vector<std::string>* warnings) {
  out.clear();
  while (out.empty())
    if (!append_chunk(out, warnings)) return false;
  return true;
}

bool JsonlReader::append_chunk(std::vector<Record>& out, std::vector<std::string>* warnings) {
  // buf_ holds [0, have_) read and not yet parsed (a partial last line), then room for a chunk and
  // the padding simdjson reads past a line: parsed in place, no copy.
  if (eof_ && have_ == 0) return false;
  if (!eof_) {
    // One allocation of chunk + a line's slack, read into as far as it goes (the partial line kept
    // from the last read shortens the next one); it grows only for a line longer than the chunk.
    const size_t pad = simdjson::SIMDJSON_PADDING;
    if (buf_.empty()) buf_.resize(chunk_ + chunk_ / 4 + pad);
    if (buf_.size() < have_ + chunk_ / 2 + pad) buf_.resize(have_ + chunk_ + pad);
    const size_t want = buf_.size() - have_ - pad;
    const size_t got = std::fread(buf_.data() + have_, 1, want, f_);
    have_ += got;
    if (got < want) eof_ = true;
  }
  std::memset(buf_.data() + have_, 0, simdjson::SIMDJSON_PADDING);
  size_t lines = 0;
  const size_t used = parse_padded(buf_.data(), have_, buf_.size(), path_, line_, eof_, out, warnings, &lines);
  line_ += lines;
  const size_t left = eof_ ? 0 : have_ - used;
  offset_ += used;
  // A line still without its newline past the bound is not telemetry (a sparse or binary file): said,
  // naming where it starts, before the buffer grows any further.
  if (left > kMaxRecordLineBytes)
    throw InputError(fmt::format("{}: a telemetry file: line {} (byte offset {}) runs past {} bytes without a "
                                 "newline; a record line is at most {}: not telemetry",
                                 path_, line_, offset_, left, human_bytes(kMaxRecordLineBytes)));
  std::memmove(buf_.data(), buf_.data() + used, left);
  have_ = left;
  return true;
}

std::vector<Record> read_jsonl(const std::string& path, std::vector<std::string>* warnings) {
  // Streamed: memory is the records and one chunk, never the file (a 2 GB file of zeros is refused at
  // its first MiB, not read whole). The records go straight into the result, which is sized once
  // from the first chunk's records per byte (a larger vector only reserves address space; growing it
  // chunk by chunk moved every record ~2 times over and faulted in fresh pages for each copy).
  JsonlReader in(path, 1 << 20);
  std::vector<Record> all;
  struct stat st {};
  const uint64_t size = ::fstat(::fileno(in.f_), &st) == 0 && st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  bool sized = false;
  while (in.append_chunk(all, warnings)) {
    if (!sized && in.offset_ > 0 && !all.empty()) {
      sized = true;
      const double per_byte = static_cast<double>(all.size()) / static_cast<double>(in.offset_);
      const auto expect = static_cast<size_t>(per_byte * static_cast<double>(size) * 1.05) + 16;
      if (expect > all.capacity()) all.reserve(expect);
    }
  }
  return all;
}

JsonlTail::JsonlTail(std::string path) : path_(std::move(path)) {}
JsonlTail::~JsonlTail() {
  if (f_) std::fclose(f_);
}

size_t JsonlTail::poll(std::vector<Record>& out, std::vector<std::string>* warnings) {
  if (!f_) {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0) return 0;  // not created yet
    f_ = fopen_input(path_, kMaxLogFileBytes, "a telemetry file");  // a FIFO or a link: refused
  }
  size_t n = 0;
  char buf[65536];
  for (;;) {
    size_t got = std::fread(buf, 1, sizeof buf, f_);
    if (got == 0) break;
    partial_.append(buf, got);
  }
  std::clearerr(f_);  // so the next poll sees data appended after this EOF
  if (partial_.size() > kMaxRecordLineBytes && partial_.find('\n') == std::string::npos)
    throw InputError(fmt::format("{}: a telemetry file: line {} runs past {} without a newline: not telemetry", path_,
                                 line_no_ + 1, human_bytes(kMaxRecordLineBytes)));
  size_t start = 0;
  for (;;) {
    size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(partial_.data() + start, nl - start);
    ++line_no_;
    start = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      out.push_back(parse_record(line, path_, line_no_));
      ++n;
    } catch (const ParseError& e) {
      if (warnings) warnings->push_back(e.what());
    }
  }
  partial_.erase(0, start);
  return n;
}

struct JsonlWriter::Impl {
  std::FILE* f = nullptr;
  std::string path;
  std::mutex mu;
};

JsonlWriter::JsonlWriter(const std::string& path, bool append) : impl_(new Impl) {
  impl_->path = path;
  impl_->f = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (!impl_->f) {
    std::string err = std::strerror(errno);
    delete impl_;
    throw IoError(path + ": cannot open for writing: " + err);
  }
}
JsonlWriter::~JsonlWriter() {
  if (impl_->f) std::fclose(impl_->f);
  delete impl_;
}
void JsonlWriter::write(const Record& r) {
  std::string line = to_json(r);
  line += '\n';
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (std::fwrite(line.data(), 1, line.size(), impl_->f) != line.size() || std::fflush(impl_->f) != 0) {
    const int err = errno;
    std::clearerr(impl_->f);
    throw IoError(fmt::format("{}: cannot write the {} record of step {}: {}", impl_->path, to_string(r.kind), r.step,
                              std::strerror(err)));
  }
}

}  // namespace flatline
