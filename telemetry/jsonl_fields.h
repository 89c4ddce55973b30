// The fields of a flatline JSONL record and the byte-level helpers both of the codec's parsers use
// (telemetry/jsonl.cpp: the general simdjson parser; telemetry/jsonl_writer_form.cpp: the one-pass
// parser of the writer's own form). Internal to telemetry/.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "telemetry/record.h"

namespace flatline::jsonl_detail {

// The fields of a record in the order to_json() writes them (and parse errors are reported in).
enum Field : int {
  fKind, fRank, fT, fStep, fOptStep, fLoss, fLossAvg, fLr, fGradNorm, fLocalGradNorm, fGradZeroFrac, fParamNorm,
  fUpdateNorm, fLossScale, fOverflow, fSkipped, fBatchHash, fEpoch, fSamplesSeen, fStepMs, fCommMs, fParamMismatches,
  fPhase, fName, fDetail, fEvalLoss, kFields, fUnknown = kFields
};
inline constexpr std::string_view kNames[kFields] = {
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
inline constexpr auto kKeyWords = [] {
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

// The value of each hex digit; 16 for any other byte.
inline constexpr auto kHex = [] {
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
inline bool hex64(std::string_view s, uint64_t& out) {
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

// The writer's form at p (an object ending before `end`) into a default Record: returns the end of the
// object (past its '}'), or nullptr (r then unspecified) for anything else. A line break is never part
// of the form, so reading a buffer of lines it stops within the line it started on
// (telemetry/jsonl_writer_form.cpp).
const char* writer_form(const char* p, const char* end, Record& r);
// The whole line in the writer's form (declared for the tests in telemetry/jsonl.h too).
bool parse_writer_form(std::string_view line, Record& r);

}  // namespace flatline::jsonl_detail
