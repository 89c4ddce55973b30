// JSON Lines encoding of Record (docs/DESIGN.md §3): one object per line, one file per
// rank (telemetry/rank-<r>.jsonl). Encoding is deterministic (fields in a fixed order, doubles in
// shortest round-trip form) so that the same run gives byte-identical files.
#pragma once
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/record.h"

namespace flatline {

// A malformed input: names the file, the 1-based line and what was expected.
// The file system refused a telemetry file (cannot open, write failed: a full disk). A recoverable,
// typed failure (docs/DESIGN.md §9): the trainer turns it into a RankError.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ParseError : public std::runtime_error {
 public:
  ParseError(const std::string& file, size_t line, const std::string& what);
  std::string file;
  size_t line;
};

std::string to_json(const Record& r);

// Parses one line. Throws ParseError(file, line, ...) on malformed JSON, a missing `kind`, or a field
// of the wrong type. Unknown fields are ignored (newer writers may add some).
Record parse_record(std::string_view line, const std::string& file, size_t line_no);

// The two parsers behind parse_record and every reader of this format: a line in the writer's own
// form (one object, no whitespace, escape, nesting or unknown key: telemetry/jsonl_writer_form.cpp says exactly
// which) is parsed in one pass; any other line, and any line that pass declines, by simdjson
// On-Demand, which alone decides what is malformed and says why. Exposed for the tests that hold the
// two to the same Records.
namespace jsonl_detail {
// The writer's form into `r` (a default Record); false: not that form, `r` then unspecified.
bool parse_writer_form(std::string_view line, Record& r);
// simdjson On-Demand alone: "" or the error message (without file:line).
std::string parse_general(std::string_view line, Record& r);
}  // namespace jsonl_detail

// A line that is not text: a control byte other than tab, ESC (colour codes) or CR (a tqdm bar's
// redraws). Every reader skips such a line with a "binary data (N bytes)" warning.
bool binary_line(std::string_view line);

// Parses a whole JSONL buffer (`file` names it in messages). Malformed lines are skipped and reported
// in `warnings` ("file:line: reason"; a line with control bytes: "binary data (N bytes), line
// skipped"); blank lines are skipped; a half-written last line (no trailing newline) is reported,
// not parsed. Unknown fields are skipped unread (their syntax is not checked beyond nesting).
std::vector<Record> parse_jsonl(std::string_view data, const std::string& file, std::vector<std::string>* warnings);

// The complete lines of `data` (line numbers from first_line), appended to `out`; returns the bytes
// consumed (up to the last newline). final: `data` ends the file, a last line without newline is
// reported as half-written.
size_t parse_jsonl_chunk(std::string_view data, const std::string& file, size_t first_line, bool final,
                         std::vector<Record>& out, std::vector<std::string>* warnings);

// The longest telemetry line read (a record is ~0.2-2 KB; an event's detail is bounded by its writer):
// a longer one is not telemetry, and reading it is refused rather than buffered without bound.
constexpr size_t kMaxRecordLineBytes = 1 << 20;

// Reads a JSONL file `chunk` bytes at a time (a run too large to hold: streaming diagnosis). The file
// is opened as untrusted input (core/input_file.h: a regular file, no link, no FIFO, within
// kMaxLogFileBytes); a line longer than kMaxRecordLineBytes throws InputError naming the file, the line
// and its byte offset.
class JsonlReader {
 public:
  JsonlReader(std::string path, size_t chunk);  // throws InputError naming the file
  ~JsonlReader();
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;
  // Replaces `out` with the next records (at least one unless the file has ended: then false).
  bool next(std::vector<Record>& out, std::vector<std::string>* warnings);
  // The next record, parsed into `r`, which must be a default Record (Record{}); false once the file
  // has ended (`r` then default). The same records, warnings and errors as next(), one at a time: a
  // merge of files keeps each file's next record in place (one Record, in cache) rather than a chunk's
  // worth (readers/log_stream.cpp, docs/DESIGN.md §10). The two may be mixed.
  bool next_record(Record& r, std::vector<std::string>* warnings);
  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_ + pos_; }  // bytes of the file parsed so far
  // Lines per byte of the bytes read and not yet parsed (at most their first 64 KiB), 0 when none: an
  // estimate of the file's records per byte, to size a result once.
  double lines_per_byte() const;

 private:
  friend std::vector<Record> read_jsonl(const std::string& path, std::vector<std::string>* warnings);
  // Reads and parses the next chunk, appending its records (maybe none) to `out`; false once the file
  // has ended.
  bool append_chunk(std::vector<Record>& out, std::vector<std::string>* warnings);
  // Moves the unparsed bytes to buf_'s start and reads the next chunk after them (eof_ once short).
  void read_more();
  // Throws InputError when the line at pos_ has run past kMaxRecordLineBytes without its newline.
  void check_line_bound() const;

  std::string path_;
  size_t chunk_;
  std::FILE* f_ = nullptr;
  std::vector<char> buf_;  // bytes read: [pos_, have_) not yet parsed (a partial last line), then room to read
  size_t pos_ = 0;         // first byte of buf_ not yet parsed
  size_t have_ = 0;        // bytes of buf_ in use
  size_t line_ = 1;        // line number of the line at pos_
  uint64_t offset_ = 0;    // byte offset of buf_'s first byte in the file
  bool eof_ = false;
};

// Reads a whole JSONL file (streamed through JsonlReader: memory is its records); throws InputError as
// JsonlReader does.
std::vector<Record> read_jsonl(const std::string& path, std::vector<std::string>* warnings);

// Follows a file that another process is appending to: each poll() returns the complete lines written
// since the last call. A partial last line is held back until its newline arrives.
class JsonlTail {
 public:
  explicit JsonlTail(std::string path);
  ~JsonlTail();
  JsonlTail(const JsonlTail&) = delete;
  JsonlTail& operator=(const JsonlTail&) = delete;
  // Appends parsed records to `out`; malformed lines go to `warnings`. Returns records appended.
  size_t poll(std::vector<Record>& out, std::vector<std::string>* warnings);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::string partial_;
  size_t line_no_ = 0;
};

// Appends records to a file, one flushed line each, so that every completed step is on disk even if
// the process dies right after. Thread-safe (the heartbeat watchdog writes from its own thread).
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path, bool append = false);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const Record& r);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace flatline
