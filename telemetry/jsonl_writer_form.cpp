// The one-pass parser of the writer's own JSONL form (telemetry/jsonl_fields.h; jsonl_detail::parse_writer_form
// in telemetry/jsonl.h);
// any line it does not take goes to the general parser in telemetry/jsonl.cpp. Compiled, like
// jsonl.cpp, for the build host's AVX2 where FLATLINE_JSON_SIMD is on (CMakeLists.txt).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include <simdjson.h>

#include "telemetry/jsonl_fields.h"

namespace flatline::jsonl_detail {
namespace {

namespace sj = ::simdjson;

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

// Each number and integer field's member of Record: a table (one load), where a switch per field
// was an indirect jump.
constexpr auto kNumberField = [] {
  std::array<std::optional<double> Record::*, kFields> m{};
  m[fLoss] = &Record::loss, m[fLossAvg] = &Record::loss_avg, m[fLr] = &Record::lr, m[fGradNorm] = &Record::grad_norm;
  m[fLocalGradNorm] = &Record::local_grad_norm, m[fGradZeroFrac] = &Record::grad_zero_frac;
  m[fParamNorm] = &Record::param_norm, m[fUpdateNorm] = &Record::update_norm, m[fLossScale] = &Record::loss_scale;
  m[fStepMs] = &Record::step_ms, m[fCommMs] = &Record::comm_ms, m[fEvalLoss] = &Record::eval_loss;
  return m;
}();
constexpr auto kIntegerField = [] {
  std::array<std::optional<int64_t> Record::*, kFields> m{};
  m[fOptStep] = &Record::opt_step, m[fEpoch] = &Record::epoch, m[fSamplesSeen] = &Record::samples_seen;
  m[fParamMismatches] = &Record::param_mismatches;
  return m;
}();

}  // namespace

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
          std::optional<double>& out = id == fT ? t : r.*kNumberField[id];
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
          (id == fRank ? rank : id == fStep ? step : r.*kIntegerField[id]) = v;
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

}  // namespace flatline::jsonl_detail
