// Small helpers shared by the line-oriented readers: line splitting with the half-written-last-line
// and binary-junk rules, strict number parsing, log timestamps, and the step-order check every
// reader applies (duplicate and out-of-order steps). Messages follow readers/reader.h: "file:line: ...".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "readers/reader.h"

namespace flatline::readers {

std::string at_line(const std::string& name, size_t line);   // "name:line"
std::string at_byte(const std::string& name, uint64_t off);  // "name: byte off"

// Calls fn(line_no, line) for every complete line ('\n'-terminated; a trailing '\r' is removed).
// A last line without newline is reported as half-written and not passed on. A line with NUL or
// other control bytes (but tab, ESC and '\r': colours and progress bars) is reported as binary junk
// and skipped. Blank lines are skipped.
void for_each_line(std::string_view data, const std::string& name, Warnings* w,
                   const std::function<void(size_t, std::string_view)>& fn);

// A whole file through a LineParser (readers/reader.h): for_each_line, then finish().
std::vector<Record> parse_lines(LineParser& p, std::string_view data, const std::string& name, Warnings* w);

// The first line of `head` that is not blank (without its newline).
std::string_view first_line(std::string_view head);

std::string_view trim(std::string_view s);

// for_each_line's rule for one complete line (without its '\n'): strips a trailing '\r'; false (and a
// warning) for binary junk, false for a blank line.
bool clean_line(std::string_view& line, const std::string& name, size_t line_no, Warnings* w);

// Substring search with glibc's memmem (two-way, far faster than string_view::find on long lines of
// frequent first characters); npos when absent.
size_t find(std::string_view s, std::string_view x, size_t from = 0);
inline bool contains(std::string_view s, std::string_view x) { return find(s, x) != std::string_view::npos; }

// A whole file's bytes, read as untrusted input (core/input_file.h: a regular file, no link, no FIFO
// or device, no /proc file, not sparse, at most kMaxWholeFileBytes); InputError naming it otherwise.
std::string read_file(const std::string& path);
// The whole of `s` (trimmed) as a number; nan/NaN/inf/Infinity/-Infinity accepted. nullopt otherwise.
std::optional<double> parse_number(std::string_view s);
// A whole number; also accepts "100.0". nullopt on anything else (or beyond +-9e15).
std::optional<int64_t> parse_integer(std::string_view s);

// "[2024-01-01 12:00:00]", "[2024-01-01 12:00:00,123]" or "[2024-01-01 12:00:00.123456]" at the start
// of `s` (after spaces): seconds since the Unix epoch (UTC, no zone). nullopt when absent.
std::optional<double> parse_leading_timestamp(std::string_view s);

// Per rank, warns on a step that repeats the previous one (dropped: `accept` returns false) or goes
// back (kept: a restart re-emits steps; the detectors expect that).
class StepOrder {
 public:
  bool accept(int rank, int64_t step, const std::string& where, Warnings* w);

 private:
  std::map<int, int64_t> last_;
};

// Appends a warning, but at most `cap` per file: then one "... more warnings" line at the end.
class WarningSink {
 public:
  WarningSink(Warnings* out, std::string name, size_t cap = 50) : out_(out), name_(std::move(name)), cap_(cap) {}
  ~WarningSink();
  Warnings* get() { return &buf_; }

 private:
  Warnings* out_;
  std::string name_;
  size_t cap_;
  Warnings buf_;
};

}  // namespace flatline::readers
