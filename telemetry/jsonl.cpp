// JSONL codec for Record. Writing is hand-rolled with fmt for a fixed field order and shortest
// round-trip doubles; parsing uses nlohmann::json.
#include "telemetry/jsonl.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

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

using nlohmann::json;

std::optional<double> get_double(const json& j, const char* key, const std::string& file, size_t line) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {
    const auto& v = it->get_ref<const std::string&>();
    if (v == "nan" || v == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (v == "inf" || v == "Infinity") return std::numeric_limits<double>::infinity();
    if (v == "-inf" || v == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  throw ParseError(file, line, fmt::format("field '{}': expected a number, got {}", key, it->dump()));
}
std::optional<int64_t> get_int(const json& j, const char* key, const std::string& file, size_t line) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    double d = it->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  throw ParseError(file, line, fmt::format("field '{}': expected an integer, got {}", key, it->dump()));
}
std::optional<bool> get_bool(const json& j, const char* key, const std::string& file, size_t line) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number_integer()) return it->get<int64_t>() != 0;
  throw ParseError(file, line, fmt::format("field '{}': expected true/false, got {}", key, it->dump()));
}
std::string get_str(const json& j, const char* key, const std::string& file, size_t line) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  throw ParseError(file, line, fmt::format("field '{}': expected a string, got {}", key, it->dump()));
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

Record parse_record(std::string_view line, const std::string& file, size_t line_no) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ParseError(file, line_no, "not valid JSON");
  if (!j.is_object()) throw ParseError(file, line_no, "expected a JSON object");
  Record r;
  std::string kind = get_str(j, "kind", file, line_no);
  if (kind == "step") r.kind = RecordKind::step;
  else if (kind == "heartbeat") r.kind = RecordKind::heartbeat;
  else if (kind == "event") r.kind = RecordKind::event;
  else if (kind == "eval") r.kind = RecordKind::eval;
  else throw ParseError(file, line_no, "field 'kind': expected step|heartbeat|event|eval, got '" + kind + "'");
  r.rank = static_cast<int>(get_int(j, "rank", file, line_no).value_or(0));
  r.t = get_double(j, "t", file, line_no).value_or(std::numeric_limits<double>::quiet_NaN());
  auto step = get_int(j, "step", file, line_no);
  if (!step) throw ParseError(file, line_no, "missing field 'step'");
  r.step = *step;
  r.opt_step = get_int(j, "opt_step", file, line_no);
  r.loss = get_double(j, "loss", file, line_no);
  r.loss_avg = get_double(j, "loss_avg", file, line_no);
  r.lr = get_double(j, "lr", file, line_no);
  r.grad_norm = get_double(j, "grad_norm", file, line_no);
  r.local_grad_norm = get_double(j, "local_grad_norm", file, line_no);
  r.grad_zero_frac = get_double(j, "grad_zero_frac", file, line_no);
  r.param_norm = get_double(j, "param_norm", file, line_no);
  r.update_norm = get_double(j, "update_norm", file, line_no);
  r.loss_scale = get_double(j, "loss_scale", file, line_no);
  r.overflow = get_bool(j, "overflow", file, line_no);
  r.skipped = get_bool(j, "skipped", file, line_no);
  std::string bh = get_str(j, "batch_hash", file, line_no);
  if (!bh.empty()) {
    // Digits only: strtoull alone would also take "-1" (as 2^64 - 1), "0x..." and leading spaces.
    if (bh.size() > 16 || bh.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      throw ParseError(file, line_no, "field 'batch_hash': expected up to 16 hex digits, got '" + bh + "'");
    r.batch_hash = std::strtoull(bh.c_str(), nullptr, 16);
  }
  r.epoch = get_int(j, "epoch", file, line_no);
  r.samples_seen = get_int(j, "samples_seen", file, line_no);
  r.step_ms = get_double(j, "step_ms", file, line_no);
  r.comm_ms = get_double(j, "comm_ms", file, line_no);
  r.param_mismatches = get_int(j, "param_mismatches", file, line_no);
  r.phase = get_str(j, "phase", file, line_no);
  r.name = get_str(j, "name", file, line_no);
  r.detail = get_str(j, "detail", file, line_no);
  r.eval_loss = get_double(j, "eval_loss", file, line_no);
  return r;
}

std::vector<Record> read_jsonl(const std::string& path, std::vector<std::string>* warnings) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Record> out;
  size_t pos = 0, line_no = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    ++line_no;
    if (nl == std::string::npos) {
      if (warnings)
        warnings->push_back(fmt::format("{}:{}: last line has no newline (half-written?), {} bytes ignored",
                                        path, line_no, content.size() - pos));
      break;
    }
    std::string_view line(content.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      out.push_back(parse_record(line, path, line_no));
    } catch (const ParseError& e) {
      if (warnings) warnings->push_back(e.what());
    }
  }
  return out;
}

JsonlTail::JsonlTail(std::string path) : path_(std::move(path)) {}
JsonlTail::~JsonlTail() {
  if (f_) std::fclose(f_);
}

size_t JsonlTail::poll(std::vector<Record>& out, std::vector<std::string>* warnings) {
  if (!f_) {
    f_ = std::fopen(path_.c_str(), "rb");
    if (!f_) return 0;  // not created yet
  }
  size_t n = 0;
  char buf[65536];
  for (;;) {
    size_t got = std::fread(buf, 1, sizeof buf, f_);
    if (got == 0) break;
    partial_.append(buf, got);
  }
  std::clearerr(f_);  // so the next poll sees data appended after this EOF
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
