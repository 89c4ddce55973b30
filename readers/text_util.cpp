// Helpers of readers/text_util.h.
#include "readers/text_util.h"

#include "core/input_file.h"

#include <fmt/format.h>

#include <sys/stat.h>

#include <cctype>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "telemetry/jsonl.h"

namespace flatline::readers {

std::string at_line(const std::string& name, size_t line) { return fmt::format("{}:{}", name, line); }
std::string at_byte(const std::string& name, uint64_t off) { return fmt::format("{}: byte {}", name, off); }

bool clean_line(std::string_view& line, const std::string& name, size_t line_no, Warnings* w) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (binary_line(line)) {
    if (w) w->push_back(fmt::format("{}: binary data ({} bytes), line skipped", at_line(name, line_no), line.size()));
    return false;
  }
  return !trim(line).empty();
}

void for_each_line(std::string_view data, const std::string& name, Warnings* w,
                   const std::function<void(size_t, std::string_view)>& fn) {
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    ++line_no;
    if (nl == std::string_view::npos) {
      if (w)
        w->push_back(fmt::format("{}: last line has no newline (half-written?), {} bytes ignored",
                                 at_line(name, line_no), data.size() - pos));
      return;
    }
    std::string_view line = data.substr(pos, nl - pos);
    pos = nl + 1;
    if (!clean_line(line, name, line_no, w)) continue;
    fn(line_no, line);
  }
}

std::vector<Record> parse_lines(LineParser& p, std::string_view data, const std::string& name, Warnings* w) {
  std::vector<Record> out;
  out.reserve(data.size() / 160 + 16);  // a record per log line of ~100-400 bytes: few reallocations
  for_each_line(data, name, w, [&](size_t no, std::string_view line) { p.line(no, line, out); });
  p.finish(out);
  return out;
}

std::string_view first_line(std::string_view head) {
  size_t pos = 0;
  while (pos < head.size()) {
    size_t nl = head.find('\n', pos);
    std::string_view l = head.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (!trim(l).empty()) return l;
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return {};
}

size_t find(std::string_view s, std::string_view x, size_t from) {
  if (from > s.size()) return std::string_view::npos;
  if (x.empty()) return from;
  const void* p = ::memmem(s.data() + from, s.size() - from, x.data(), x.size());
  return p ? static_cast<size_t>(static_cast<const char*>(p) - s.data()) : std::string_view::npos;
}

std::string read_file(const std::string& path) {
  // Untrusted input (core/input_file.h): a link, a FIFO, a device, a /proc file, a sparse or oversized
  // file throws InputError, which no reader's fallback swallows.
  return read_input_file(path, kMaxWholeFileBytes, "a log file");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<double> parse_number(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 64) return std::nullopt;
  auto is = [&](std::string_view w) {
    if (s.size() != w.size()) return false;
    for (size_t i = 0; i < w.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(s[i])) != w[i]) return false;
    return true;
  };
  // strtod alone would also take hex floats, "infinity..." and leading spaces: digits only, and
  // the spellings of nan and inf that JSON writers (Python's, W&B's) use.
  if (s.find_first_not_of("0123456789+-.eE") != std::string_view::npos) {
    if (is("nan") || is("-nan") || is("+nan")) return std::numeric_limits<double>::quiet_NaN();
    if (is("inf") || is("+inf") || is("infinity") || is("+infinity")) return std::numeric_limits<double>::infinity();
    if (is("-inf") || is("-infinity")) return -std::numeric_limits<double>::infinity();
    return std::nullopt;
  }
  std::string_view t = s;
  if (t.front() == '+') t.remove_prefix(1);
  if (t.empty() || t.front() == '+' || t.front() == '-' && t.size() > 1 && t[1] == '+') return std::nullopt;
  double v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);  // no allocation, correctly rounded
  if (r.ec == std::errc::result_out_of_range) {                      // strtod's answer: +-HUGE_VAL or 0
    char buf[72];
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = 0;
    char* end = nullptr;
    v = std::strtod(buf, &end);
    return end == buf + s.size() ? std::optional<double>(v) : std::nullopt;
  }
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_integer(std::string_view s) {
  auto v = parse_number(s);
  if (!v || !std::isfinite(*v) || std::floor(*v) != *v || std::fabs(*v) > 9e15) return std::nullopt;
  return static_cast<int64_t>(*v);
}

namespace {
// Days since 1970-01-01 of a civil date (proleptic Gregorian), Howard Hinnant's algorithm.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}
bool digits(std::string_view s, size_t at, size_t n, int& out) {
  if (at + n > s.size()) return false;
  out = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}
}  // namespace

std::optional<double> parse_leading_timestamp(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  // [YYYY-MM-DD HH:MM:SS
  int Y, M, D, h, m, sec;
  if (s.size() < 21 || s[0] != '[' || !digits(s, 1, 4, Y) || s[5] != '-' || !digits(s, 6, 2, M) || s[8] != '-' ||
      !digits(s, 9, 2, D) || (s[11] != ' ' && s[11] != 'T') || !digits(s, 12, 2, h) || s[14] != ':' ||
      !digits(s, 15, 2, m) || s[17] != ':' || !digits(s, 18, 2, sec))
    return std::nullopt;
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60) return std::nullopt;
  double frac = 0;
  size_t i = 20;
  if (i < s.size() && (s[i] == ',' || s[i] == '.')) {
    double scale = 0.1;
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && i < 32; ++i, scale /= 10)
      frac += (s[i] - '0') * scale;
  }
  if (i >= s.size() || s[i] != ']') return std::nullopt;
  return static_cast<double>(days_from_civil(Y, M, D) * 86400 + h * 3600 + m * 60 + sec) + frac;
}

bool StepOrder::accept(int rank, int64_t step, const std::string& where, Warnings* w) {
  auto it = last_.find(rank);
  if (it != last_.end()) {
    if (step == it->second) {
      if (w) w->push_back(fmt::format("{}: duplicate step {} (rank {}), dropped", where, step, rank));
      return false;
    }
    if (step < it->second && w)
      w->push_back(fmt::format("{}: step {} after step {} (rank {}): out of order or a restart, kept", where, step,
                               it->second, rank));
  }
  last_[rank] = step;
  return true;
}

WarningSink::~WarningSink() {
  if (!out_) return;
  for (size_t i = 0; i < buf_.size() && i < cap_; ++i) out_->push_back(std::move(buf_[i]));
  if (buf_.size() > cap_) out_->push_back(fmt::format("{}: {} more warnings not shown", name_, buf_.size() - cap_));
}

}  // namespace flatline::readers
