// LogStream (readers/reader.h): a log handed on in batches; a flatline run directory's rank files merged
// by time as they are read (a cursor per file, a heap by each file's last t), any other log read whole.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/input_file.h"
#include "readers/rank_files.h"
#include "readers/reader.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace fs = std::filesystem;

struct LogStream::Impl {
  std::string format;
  std::vector<std::string> files;
  int world_size = 0;
  LogFacts facts;
  Warnings warnings;
  int64_t handed = 0;
  // held in memory
  LogData whole;
  size_t at = 0;
  // streamed rank files: each file's next record parsed in place (JsonlReader::next_record), moved
  // once into the caller's batch (docs/DESIGN.md §10): a chunk's worth of records per file, written,
  // moved from and freed, was ~15% of the streamed read.
  struct Cursor {
    std::unique_ptr<JsonlReader> reader;
    Record head;  // the file's next record
    double key = -std::numeric_limits<double>::infinity();
    Warnings warnings;  // the file's, said in file order at the end (as read_log says them), whenever read
    std::optional<int64_t> named;  // the rank in the file's name
    int64_t other = 0;
    int other_rank = -1;
    bool any = false;
  };
  std::vector<Cursor> cursors;
  std::vector<size_t> heap;
  bool streamed = false, done = false;

  // The cursor's current record's key (its t, or the last t before it in its file).
  double key_of(Cursor& c) {
    const double t = c.head.t;
    if (std::isfinite(t)) c.key = std::max(c.key, t);
    return c.key;
  }
  // The file's next record into c.head (a default Record); false at the file's end.
  bool refill(Cursor& c) {
    try {
      return c.reader->next_record(c.head, &c.warnings);
    } catch (const InputError&) {
      throw;  // not telemetry (a line without end, ...): the run is refused, never read without the file
    } catch (const std::exception& e) {
      c.warnings.push_back(e.what());
      return false;
    }
  }
  bool later(size_t a, size_t b) const {
    const double ka = cursors[a].key, kb = cursors[b].key;
    return ka != kb ? ka > kb : a > b;
  }
  void sift_top() {
    rank_files::sift_top(heap, [this](size_t a, size_t b) { return later(a, b); });
  }
  // Each file's warnings, in file order.
  void say_file_warnings() {
    for (Cursor& c : cursors) {
      warnings.insert(warnings.end(), c.warnings.begin(), c.warnings.end());
      c.warnings.clear();
    }
  }
  void finish() {
    done = true;
    say_file_warnings();
    for (size_t f = 0; f < cursors.size(); ++f) {
      const Cursor& c = cursors[f];
      if (c.other)
        warnings.push_back(rank_files::other_rank_warning(files[f], c.other, c.other_rank, *c.named));
    }
  }
};

LogStream::LogStream(const std::string& path, const std::string& format) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  LogFiles lf = locate_log(path, format);
  // Stream only flatline rank files of a directory; everything else is read whole.
  bool stream = false;
  std::error_code ec;
  if (fs::is_directory(path, ec) && !lf.files.empty()) {
    std::string head;
    {
      std::FILE* f = fopen_input(lf.files.front(), kMaxLogFileBytes, "a log file");  // refuses a FIFO at once
      head.resize(64 << 10);
      head.resize(std::fread(head.data(), 1, head.size(), f));
      std::fclose(f);
    }
    const std::string fmt_name = format != "auto" ? format : (head.empty() ? "auto" : detect_format(lf.files.front(), head));
    stream = fmt_name != "auto" && reader_named(fmt_name).records_name_rank && lf.files.size() > 1;
    if (stream) m.format = fmt_name;
  }
  if (!stream) {
    m.whole = read_log(path, format);
    m.format = m.whole.format;
    m.files = m.whole.files;
    m.world_size = m.whole.world_size;
    m.facts = m.whole.facts;
    m.warnings = m.whole.warnings;
    return;
  }
  m.streamed = true;
  int max_named = -1;
  for (const auto& f : lf.files) {
    Impl::Cursor c;
    try {
      c.reader = rank_files::open_reader(f, lf.files.size());
    } catch (const InputError&) {
      throw;  // a FIFO, a link, a sparse file: refused with its reason, not skipped
    } catch (const std::exception& e) {
      m.warnings.push_back(e.what());
      continue;
    }
    c.named = rank_files::named_rank(f);
    if (c.named && *c.named < 1 << 20) max_named = std::max<int>(max_named, static_cast<int>(*c.named));
    m.files.push_back(f);
    m.cursors.push_back(std::move(c));
  }
  m.world_size = std::max<int>(static_cast<int>(m.files.size()), max_named + 1);
  for (size_t i = 0; i < m.cursors.size(); ++i) {
    Impl::Cursor& c = m.cursors[i];
    if (!m.refill(c)) {
      c.warnings.push_back(m.files[i] + ": no usable records");
      continue;
    }
    m.key_of(c);
    m.heap.push_back(i);
  }
  if (m.heap.empty()) {
    m.say_file_warnings();
    throw ReadError(path + ": nothing usable (" + (m.warnings.empty() ? "" : m.warnings.back()) + ")");
  }
  auto later = [&m](size_t a, size_t b) { return m.later(a, b); };
  std::make_heap(m.heap.begin(), m.heap.end(), later);
}

LogStream::~LogStream() = default;

bool LogStream::next(std::vector<Record>& out, size_t max) {
  Impl& m = *impl_;
  out.clear();
  if (!m.streamed) {
    const size_t n = std::min(max, m.whole.records.size() - m.at);
    out.assign(std::make_move_iterator(m.whole.records.begin() + static_cast<long>(m.at)),
               std::make_move_iterator(m.whole.records.begin() + static_cast<long>(m.at + n)));
    m.at += n;
    m.handed += static_cast<int64_t>(n);
    return n > 0;
  }
  while (out.size() < max && !m.heap.empty()) {
    Impl::Cursor& c = m.cursors[m.heap.front()];
    Record& r = c.head;
    if (c.named && r.rank != *c.named) ++c.other, c.other_rank = r.rank;
    out.push_back(std::move(r));
    rank_files::reset(r);
    if (m.refill(c)) {
      m.key_of(c);
    } else {
      m.heap.front() = m.heap.back();
      m.heap.pop_back();
      if (m.heap.empty()) break;
    }
    m.sift_top();
  }
  m.handed += static_cast<int64_t>(out.size());
  if (m.heap.empty() && !m.done) m.finish();
  return !out.empty();
}

const std::string& LogStream::format() const { return impl_->format; }
const std::vector<std::string>& LogStream::files() const { return impl_->files; }
int LogStream::world_size() const { return impl_->world_size; }
const LogFacts& LogStream::facts() const { return impl_->facts; }
const Warnings& LogStream::warnings() const { return impl_->warnings; }
int64_t LogStream::records() const { return impl_->handed; }
bool LogStream::streaming() const { return impl_->streamed; }

}  // namespace flatline
