// JSONL codec for Record. Writing is hand-rolled with fmt for a fixed field order and shortest
// round-trip doubles (nlohmann only escapes strings). Parsing: a line in the writer's own form in one
// pass (telemetry/jsonl_writer_form.cpp); any other line with simdjson's On-Demand API (Debian
// libsimdjson-dev 3.0): one parser reused for every line, the fields dispatched in the order the
// writer puts them, no intermediate DOM.
#include "telemetry/jsonl.h"

#include <sys/stat.h>

#include "core/input_file.h"
#include "telemetry/jsonl_fields.h"

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
using namespace jsonl_detail;  // the fields and their keys (telemetry/jsonl_fields.h)


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


std::string jsonl_detail::parse_general(std::string_view line, Record& r) {
  return line_codec().parse_general(padded_copy(line), r);
}

namespace {

// What became of the line at base[pos, n) that the writer's form did not take.
enum class Line { record, skipped, incomplete };

// The line at base[pos, n) (a buffer with `cap` >= n + SIMDJSON_PADDING readable bytes) by simdjson,
// into `r` (a default Record). record: `r` holds it; skipped: blank or malformed (said in `warnings`),
// `r` default again; incomplete: no newline before n (pos and line_no unchanged). pos and line_no (the
// last line consumed) move past a line consumed. Every reader of this format goes through here after
// the one-pass form (parse_padded, JsonlReader::next_record): one wording of every warning.
Line parse_other_line(const char* base, size_t& pos, size_t n, size_t cap, const std::string& file, size_t& line_no,
                      Record& r, std::vector<std::string>* warnings) {
  const char* nl = static_cast<const char*>(std::memchr(base + pos, '\n', n - pos));
  if (!nl) return Line::incomplete;
  ++line_no;
  const size_t len = static_cast<size_t>(nl - (base + pos));
  std::string_view line(base + pos, len);
  const size_t start = pos;
  pos += len + 1;
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return Line::skipped;
  std::string e = line_codec().parse_general(simdjson::padded_string_view(base + start, len, cap - start), r);  // (not the form)
  if (e.empty()) return Line::record;
  r = Record();
  if (warnings) {
    if (binary_line(line)) warnings->push_back(fmt::format("{}:{}: binary data ({} bytes), line skipped", file, line_no, len));
    else warnings->push_back(fmt::format("{}:{}: {}", file, line_no, e));
  }
  return Line::skipped;
}

void warn_half_written(std::vector<std::string>* warnings, const std::string& file, size_t line_no, size_t bytes) {
  if (warnings)
    warnings->push_back(fmt::format("{}:{}: last line has no newline (half-written?), {} bytes ignored", file, line_no, bytes));
}

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
  size_t pos = 0, line_no = first_line - 1;
  while (pos < n) {
    Record& r = out.emplace_back();
    // A line of the writer's form ends where the form does: no search for its newline.
    const char* stop = writer_form(base + pos, base + n, r);
    if (stop && stop < base + n && *stop == '\n') {
      ++line_no;
      pos = static_cast<size_t>(stop - base) + 1;
      continue;
    }
    r = Record();
    const Line got = parse_other_line(base, pos, n, cap, file, line_no, r, warnings);
    if (got == Line::record) continue;
    out.pop_back();
    if (got == Line::incomplete) {
      if (final) warn_half_written(warnings, file, line_no + 1, n - pos);
      break;
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

void JsonlReader::check_line_bound() const {
  // A line still without its newline past the bound is not telemetry (a sparse or binary file): said,
  // naming where it starts, before the buffer grows any further.
  const size_t left = have_ - pos_;
  if (!eof_ && left > kMaxRecordLineBytes)
    throw InputError(fmt::format("{}: a telemetry file: line {} (byte offset {}) runs past {} bytes without a "
                                 "newline; a record line is at most {}: not telemetry",
                                 path_, line_, offset_ + pos_, left, human_bytes(kMaxRecordLineBytes)));
}

void JsonlReader::read_more() {
  // buf_ holds [pos_, have_) read and not yet parsed (a partial last line), moved to its start, then
  // room for a chunk and the padding simdjson reads past a line: parsed in place, no copy. One
  // allocation of chunk + a line's slack, read into as far as it goes (the partial line kept from the
  // last read shortens the next one); it grows only for a line longer than the chunk.
  const size_t left = have_ - pos_;
  if (left) std::memmove(buf_.data(), buf_.data() + pos_, left);
  offset_ += pos_;
  pos_ = 0;
  have_ = left;
  const size_t pad = simdjson::SIMDJSON_PADDING;
  if (buf_.empty()) buf_.resize(chunk_ + chunk_ / 4 + pad);
  if (buf_.size() < have_ + chunk_ / 2 + pad) buf_.resize(have_ + chunk_ + pad);
  const size_t want = buf_.size() - have_ - pad;
  const size_t got = std::fread(buf_.data() + have_, 1, want, f_);
  have_ += got;
  if (got < want) eof_ = true;
  std::memset(buf_.data() + have_, 0, simdjson::SIMDJSON_PADDING);
}

bool JsonlReader::append_chunk(std::vector<Record>& out, std::vector<std::string>* warnings) {
  if (eof_ && have_ == pos_) return false;
  if (!eof_) read_more();
  size_t lines = 0;
  const size_t used = parse_padded(buf_.data() + pos_, have_ - pos_, buf_.size() - pos_, path_, line_, eof_, out,
                                   warnings, &lines);
  line_ += lines;
  pos_ += used;
  if (eof_) have_ = pos_;  // (a half-written last line is ignored, said above; offset() leaves it out)
  check_line_bound();
  return true;
}

bool JsonlReader::next_record(Record& r, std::vector<std::string>* warnings) {
  for (;;) {
    if (pos_ < have_) {
      // A line of the writer's form ends where the form does: no search for its newline (parse_padded).
      const char* base = buf_.data();
      const char* stop = writer_form(base + pos_, base + have_, r);
      if (stop && stop < base + have_ && *stop == '\n') {
        ++line_;
        pos_ = static_cast<size_t>(stop - base) + 1;
        return true;
      }
      r = Record();
      size_t line_no = line_ - 1;
      const Line got = parse_other_line(base, pos_, have_, buf_.size(), path_, line_no, r, warnings);
      line_ = line_no + 1;
      if (got == Line::record) return true;
      if (got == Line::skipped) continue;
      check_line_bound();
    }
    if (eof_) {
      if (pos_ < have_) warn_half_written(warnings, path_, line_, have_ - pos_);
      have_ = pos_;  // (ignored, said once; offset() leaves it out)
      return false;
    }
    read_more();
  }
}

double JsonlReader::lines_per_byte() const {
  const size_t n = std::min<size_t>(have_ - pos_, 1 << 16);
  if (n == 0) return 0;
  const char* const base = buf_.data() + pos_;
  size_t lines = 0;
  for (const char* p = base; (p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(base + n - p)))); ++p)
    ++lines;
  return static_cast<double>(std::max<size_t>(lines, 1)) / static_cast<double>(n);
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
    if (!sized && in.offset() > 0 && !all.empty()) {
      sized = true;
      const double per_byte = static_cast<double>(all.size()) / static_cast<double>(in.offset());
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
