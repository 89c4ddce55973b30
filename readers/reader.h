// Readers for the logs engineers already have: each turns one log format into flatline Records
// (telemetry/record.h) so that the same detectors and checklist run on it (docs/DESIGN.md
// §10). One reader per file, each registering itself (readers/registry.h) with
// its name (the `--format` value), the file names it usually has, a content sniffer, its parser and,
// where the format has one, its directory layout. Nothing else lists the formats: `--format`'s
// accepted values, the detection order and every error message come from the registry.
//
// Errors, two tiers: a reader skips what it cannot use and says so in a warning that names the
// file and the 1-based line ("file:12: ...") or the byte offset ("file: byte 4096: ..."); it
// throws ReadError (and only ReadError) when nothing in the input is usable. Never anything else:
// every reader is fuzzed (fuzz/) against exactly this contract.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/record.h"

namespace flatline {

// The input cannot be read at all (missing, empty, not this format, no usable record).
class ReadError : public std::runtime_error {
 public:
  explicit ReadError(const std::string& what) : std::runtime_error(what) {}
};

using Warnings = std::vector<std::string>;

// The common signature: `data` is the whole file, `name` its path (for messages).
using ParseFn = std::vector<Record> (*)(std::string_view data, const std::string& name, Warnings* w);

// An incremental parser for line-oriented formats (what `diagnose --follow` feeds as a log grows):
// line() gets each complete line (no '\n', a trailing '\r' removed, junk already filtered), in file
// order, and appends the records it completes; finish() flushes what a last line left pending.
// Parsing a whole file = every line through line(), then finish().
class LineParser {
 public:
  virtual ~LineParser() = default;
  virtual void line(size_t line_no, std::string_view line, std::vector<Record>& out) = 0;
  virtual void finish(std::vector<Record>& out) {}
  // No new line for a while (a poll found the file quiet): records held back for lines that usually
  // follow at once (readers/text_log.h) are as complete as they will get.
  virtual void idle(std::vector<Record>& out) {}
};
using LineParserFactory = std::unique_ptr<LineParser> (*)(const std::string& name, Warnings* w);

// What a log says about the run beyond its records (detectors/detector.h DetectorConfig).
struct LogFacts {
  int64_t planned_steps = 0;  // the step the run is planned to end at (HF max_steps, Megatron train_iters); 0 unknown
};

// How sure a sniffer is that the first bytes of a file are its format. Detection goes by content
// first; a file-name hint only breaks ties and adds candidates the content did not rule out.
enum class Sniff { no = 0, maybe = 1, likely = 2, sure = 3 };

struct ReaderDef {
  std::string name;                     // the --format value: flatline, hf, megatron, ...
  std::string summary;                  // one line: what writes this format
  std::vector<std::string> name_hints;  // file-name globs ("trainer_state.json", "*.jsonl", "*tfevents*")
  Sniff (*sniff)(std::string_view head) = nullptr;  // head: the first kSniffBytes of the file
  ParseFn parse = nullptr;
  LogFacts (*facts)(std::string_view data) = nullptr;  // optional: what the file says about the run
  // The files of this format inside a directory, in reading order (nullptr: the directory's regular
  // files whose names match name_hints, sorted). E.g. HF's newest checkpoint-N/trainer_state.json.
  std::vector<std::string> (*locate)(const std::string& dir) = nullptr;
  LineParserFactory lines = nullptr;    // set for line-oriented formats (incremental --follow)
  bool records_name_rank = false;       // records carry their rank (else a rank directory names it)
  int priority = 100;                   // order among equal evidence, and in --format's list
};

// A Megatron log opens with its whole argument dump (~40 KB) before the first iteration line.
constexpr size_t kSniffBytes = 1 << 20;

// Every registered reader, by priority (then name).
const std::vector<const ReaderDef*>& all_readers();
// The reader called `name`; throws std::invalid_argument naming the accepted values ("auto" is not a
// reader: it means detect).
const ReaderDef& reader_named(const std::string& name);
// "auto|flatline|hf|..." for help texts and messages.
std::string format_choices();
// Kept for callers that had an enum: validates `s` ("auto" or a reader's name) and returns it.
std::string parse_log_format(const std::string& s);
ParseFn parser_for(const std::string& format);  // nullptr for "auto"

// Readers that may have written `path` (its name) starting with `head`, most likely first: every
// reader whose sniffer does not say no, or says no but whose name hint matches and whose sniffer
// could not judge (Sniff::maybe counts as content). Empty when nothing fits.
std::vector<const ReaderDef*> candidates(const std::string& path, std::string_view head);
// The most likely reader's name, or "auto" when none fits.
std::string detect_format(const std::string& path, std::string_view head);

// What read_log found: records in recorded order (ranks merged by t, stable), the files read.
struct LogData {
  std::string format = "auto";  // the reader that read the (first) file
  std::vector<std::string> files;
  std::vector<Record> records;
  Warnings warnings;
  int world_size = 0;  // ranks, where the files say (flatline rank files, rank directories); 0 = infer
  LogFacts facts;      // the largest each file says
};

// Reads a file or a directory (a flatline run dir, a dir of rank-*.jsonl, an HF output/checkpoint
// dir with trainer_state.json, a Lightning log dir with metrics.csv, a TensorBoard log dir, a W&B run
// dir, ...: each reader's layout). `format` "auto" detects per file by content; when a reader finds
// nothing usable the next candidate is tried. Throws ReadError when nothing is usable, listing every
// format tried and why each refused.
LogData read_log(const std::string& path, const std::string& format = "auto");

// A log read as a stream of records in recorded order, for diagnose and replay of runs too large
// to hold: flatline rank files (a 1024-rank run) are read a chunk at a time and merged by t as they
// are consumed (memory: the chunks and their records, ~3 x 128 MiB whatever the run's size; each file is assumed in time
// order, as the harness writes it: a record whose t goes back stays in its file's order). Any other
// format is read whole by read_log and handed out from memory. Throws ReadError as read_log does.
#define FLATLINE_READERS_LOGSTREAM 1  // (for bench/bench_readers.cpp, which also builds against older trees)
class LogStream {
 public:
  explicit LogStream(const std::string& path, const std::string& format = "auto");
  ~LogStream();
  LogStream(const LogStream&) = delete;
  LogStream& operator=(const LogStream&) = delete;
  // Replaces `out` with up to `max` next records; false when there are none left. (2048 records, ~0.8 MB,
  // stay in a core's cache from one call to the next: 16384 made each call's clear of the last batch
  // wait on memory.)
  bool next(std::vector<Record>& out, size_t max = 2048);
  const std::string& format() const;
  const std::vector<std::string>& files() const;
  int world_size() const;
  const LogFacts& facts() const;
  const Warnings& warnings() const;  // complete once next() has returned false
  int64_t records() const;           // handed out so far
  bool streaming() const;            // read as consumed (not held in memory)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The files read_log would read for `path` under `format` ("auto": the first layout that has files),
// with the reader's name when forced or known from the layout ("auto" otherwise). Throws ReadError
// when there are none. For --follow, which re-reads them as they grow.
struct LogFiles {
  std::string format = "auto";
  std::vector<std::string> files;
};
LogFiles locate_log(const std::string& path, const std::string& format = "auto");

// Parses one file's bytes with `format` ("auto": detect, then fall back through the candidates).
// Sets *used to the reader that produced the records. Throws ReadError listing what each refused.
std::vector<Record> parse_log_bytes(std::string_view data, const std::string& path, const std::string& format,
                                    Warnings* w, std::string* used = nullptr);

// Merges records of several files (ranks) by t, stable: a record without t sorts with the record
// before it in its own file; ties keep file order. The records are moved out of `files`.
std::vector<Record> merge_by_time(std::vector<std::vector<Record>> files);

// The rank a file's path names, for formats that do not carry one: a directory or file name
// "rank<N>", "rank_<N>", "rank-<N>" (torch.distributed users' per-rank log dirs). -1 if none.
int rank_from_path(const std::string& path);

}  // namespace flatline
