// Follower: a live job's logs as they grow, for `flatline diagnose --follow` (docs/DESIGN.md §10). Each poll()
// returns the records written since the previous one, in file order per file (files interleave: the
// detectors do not depend on how they do, detectors/detector.h).
//  - A file of a line-oriented format (flatline JSONL, Megatron, DeepSpeed, console: ReaderDef::lines)
//    is read from where the last poll stopped; a last line without its newline waits for it. The
//    format's LineParser keeps its state across polls, so a record comes out as soon as its lines
//    are complete (readers/text_log.h: the writers of one step print one after another).
//  - Any other format (trainer_state.json rewritten at each save, metrics.csv, TensorBoard event
//    files, a W&B run) is parsed again whole when its size or modification time changes; records
//    already handed out are not handed out again (by position when the earlier records are the same,
//    else by step). The records of its newest step are held back until a poll finds the file
//    unchanged (a TensorBoard step's scalars arrive one by one).
//  - Rotation (the path now names another file: logrotate's create, a restart's new log) and
//    truncation (copytruncate: the file is shorter than what was read) restart reading that path from
//    its first byte, with the parser's state kept: it is the same run's stream.
//  - A directory is located again at every poll (readers/reader.h locate_log): rank files, event
//    files, checkpoint-N/ and W&B runs that appear later are picked up. A path that does not exist
//    yet is waited for.
// Errors: a file that cannot be read is a warning, and reading goes on; nothing here throws on a
// file's content (the readers' ReadError for a whole file that is not usable yet is a warning).
#pragma once
#define FLATLINE_READERS_FOLLOW 1  // (for bench/bench_readers.cpp, which also builds against older trees)
#include <memory>
#include <string>
#include <vector>

#include "readers/reader.h"

namespace flatline {

class Follower {
 public:
  explicit Follower(std::string path, std::string format = "auto");
  ~Follower();
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  // Appends the records written since the last poll; returns how many.
  size_t poll(std::vector<Record>& out);
  // The end of following: what the parsers still hold (a pending step, held-back records).
  void finish(std::vector<Record>& out);
  // Warnings since the last call (file:line, file: byte N, or "file: ..." for a read error).
  Warnings take_warnings();

  std::string format() const;               // the first file's reader ("auto" before any data)
  std::vector<std::string> files() const;   // followed so far
  int world_size() const;                   // rank files seen (flatline), else 0
  LogFacts facts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flatline
