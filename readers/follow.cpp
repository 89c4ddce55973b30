// Follower (readers/follow.h).
#include "readers/follow.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "core/input_file.h"
#include "readers/text_util.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

constexpr size_t kReadChunk = 1 << 20;  // bytes read per file per poll at most (a big backlog: several polls)

struct Key {
  RecordKind kind;
  int rank;
  int64_t step;
  bool operator==(const Key& o) const { return kind == o.kind && rank == o.rank && step == o.step; }
};
Key key_of(const Record& r) { return {r.kind, r.rank, r.step}; }

struct Stat {
  bool exists = false;  // something is there (lstat: a link is not followed)
  bool ok = false;      // a regular file
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
};
Stat stat_of(const std::string& p) {
  struct stat st;
  Stat s;
  if (::lstat(p.c_str(), &st) != 0) return s;
  s.exists = true;
  s.ok = S_ISREG(st.st_mode);
  s.dev = st.st_dev, s.ino = st.st_ino, s.size = st.st_size;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

}  // namespace

struct Follower::Impl {
  std::string path, format;
  Warnings warnings;
  LogFacts facts;
  std::string first_format = "auto";
  int world = 0;

  struct Tail {
    std::string path;
    bool refused = false;  // not a file flatline reads (a FIFO, a link, ...): said once, never opened
    bool missing = false;  // was there, is gone: said once, waited for
    const ReaderDef* reader = nullptr;
    int rank = -1;  // from the path, for formats without ranks (several files)
    // line mode
    std::unique_ptr<LineParser> lines;
    std::FILE* f = nullptr;
    Stat opened;
    uint64_t offset = 0;
    std::string partial;
    size_t line_no = 0;
    // whole mode
    Stat seen;
    std::vector<Key> handed;  // keys of the records handed out, in order
    std::vector<Record> held;  // the newest step's records, until the file is quiet
    ~Tail() {
      if (f) std::fclose(f);
    }
  };
  std::map<std::string, std::unique_ptr<Tail>> tails;
  std::vector<char> buf;
  std::vector<std::string> order;  // paths in the order first seen
  // whole-mode records handed out per reader, by (kind, rank) -> last step: a newer file of the same
  // layout (the next checkpoint-N/trainer_state.json) repeats the history before it.
  std::map<std::tuple<std::string, RecordKind, int>, int64_t> last_step;

  bool said_absent = false;
  void locate() {
    std::vector<std::string> now;
    try {
      now = locate_log(path, format).files;
    } catch (const ReadError& e) {
      if (!said_absent) warnings.push_back(std::string(e.what()) + "; waiting for it");  // not there yet
      said_absent = true;
      return;
    }
    said_absent = false;
    for (const auto& f : now)
      if (!tails.count(f)) {
        auto t = std::make_unique<Tail>();
        t->path = f;
        tails[f] = std::move(t);
        order.push_back(f);
      }
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      int named = 0;
      for (const auto& p : order) named += rank_from_path(p) >= 0 || fs::path(p).stem().string().rfind("rank-", 0) == 0;
      world = std::max(world, named > 1 ? named : 0);
    }
  }

  // The reader for a file, from its first bytes (or the forced format).
  // Opens a followed file as untrusted input (core/input_file.h); a refusal is a warning, once, and the
  // file is not opened again (a FIFO would block the open, /proc/kmsg the read).
  std::FILE* open(Tail& t) {
    if (t.refused) return nullptr;
    try {
      return fopen_input(t.path, kMaxLogFileBytes, "a followed log");
    } catch (const InputError& e) {
      struct stat l {};
      if (::lstat(t.path.c_str(), &l) != 0) return nullptr;  // gone between the listing and the open
      warnings.push_back(std::string(e.what()) + "; not followed");
      t.refused = true;
      return nullptr;
    }
  }

  bool resolve(Tail& t) {
    if (t.reader) return true;
    std::string head;
    if (std::FILE* f = open(t)) {
      head.resize(kSniffBytes);
      head.resize(std::fread(head.data(), 1, head.size(), f));
      std::fclose(f);
    }
    if (head.empty()) return false;
    if (format != "auto") {
      t.reader = &reader_named(format);
    } else {
      auto c = candidates(t.path, head);
      if (c.empty()) {
        warnings.push_back(t.path + ": unknown log format (force one with --format)");
        t.reader = nullptr;
        return false;
      }
      t.reader = c.front();
    }
    if (first_format == "auto") first_format = t.reader->name;
    if (t.reader->lines) t.lines = t.reader->lines(t.path, &warnings);
    if (!t.reader->records_name_rank && order.size() > 1) t.rank = rank_from_path(t.path);
    return true;
  }

  void emit(Tail& t, std::vector<Record>& got, std::vector<Record>& out) {
    for (auto& r : got) {
      if (t.rank >= 0) r.rank = t.rank;
      out.push_back(std::move(r));
    }
    got.clear();
  }

  // A followed file that has gone is said once (and again if it comes back and goes again).
  bool present(Tail& t, const Stat& now) {
    if (now.ok) {
      t.missing = false;
      return true;
    }
    if (now.exists) {  // a FIFO, a link, a device in its place: refused, with the reason, once
      if (std::FILE* f = open(t)) std::fclose(f);
      return false;
    }
    if (!t.missing && !t.refused) warnings.push_back(t.path + ": no longer there (deleted or moved); waiting for it");
    t.missing = true;
    return false;
  }

  size_t poll_lines(Tail& t, std::vector<Record>& out) {
    const Stat now = stat_of(t.path);
    if (!present(t, now)) return 0;
    bool restart = false;
    if (t.f && (now.ino != t.opened.ino || now.dev != t.opened.dev)) restart = true;       // rotated
    else if (t.f && static_cast<uint64_t>(now.size) < t.offset) restart = true;          // truncated
    if (restart) {
      std::fclose(t.f);
      t.f = nullptr;
      t.partial.clear();
      warnings.push_back(t.path + ": rotated or truncated; reading it again from its start");
    }
    if (!t.f) {
      t.f = open(t);
      if (!t.f) return 0;
      t.opened = now;
      t.offset = 0;
    }
    std::vector<Record> got;
    buf.resize(kReadChunk);  // kept between polls: no page faults for a few bytes
    const size_t n = std::fread(buf.data(), 1, buf.size(), t.f);
    if (n == 0) {  // quiet since the last poll
      t.lines->idle(got);
      const size_t k = got.size();
      emit(t, got, out);
      return k;
    }
    std::clearerr(t.f);  // so the next poll sees what is appended after this EOF
    t.offset += n;
    t.partial.append(buf.data(), n);
    size_t start = 0;
    for (;;) {
      const size_t nl = t.partial.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(t.partial.data() + start, nl - start);
      start = nl + 1;
      ++t.line_no;
      if (readers::clean_line(line, t.path, t.line_no, &warnings)) t.lines->line(t.line_no, line, got);
    }
    if (t.reader->facts && start > 0)
      facts.planned_steps =
          std::max(facts.planned_steps, t.reader->facts(std::string_view(t.partial).substr(0, start)).planned_steps);
    t.partial.erase(0, start);
    if (t.partial.size() > kMaxRecordLineBytes) {  // a line without end: dropped, said, never held without bound
      warnings.push_back(fmt::format("{}:{}: a line runs past {} bytes without a newline; {} bytes skipped", t.path,
                                     t.line_no + 1, kMaxRecordLineBytes, t.partial.size()));
      t.partial.clear();
    }
    const size_t k = got.size();
    emit(t, got, out);
    return k;
  }

  size_t poll_whole(Tail& t, std::vector<Record>& out, bool final) {
    const Stat now = stat_of(t.path);
    if (!present(t, now) || t.refused) return 0;
    const bool changed = now.size != t.seen.size || now.mtime_ns != t.seen.mtime_ns || now.ino != t.seen.ino;
    std::vector<Record> got;
    if (!changed) {
      got = std::move(t.held);  // quiet: the newest step is complete
      t.held.clear();
      const size_t k = got.size();
      for (const auto& r : got) t.handed.push_back(key_of(r));
      emit(t, got, out);
      return k;
    }
    t.seen = now;
    std::vector<Record> recs;
    try {
      const std::string data = readers::read_file(t.path);
      Warnings w;
      recs = parse_log_bytes(data, t.path, t.reader->name, &w);
      if (t.reader->facts) facts.planned_steps = std::max(facts.planned_steps, t.reader->facts(data).planned_steps);
      if (final) warnings.insert(warnings.end(), w.begin(), w.end());
    } catch (const ReadError& e) {
      if (final) warnings.push_back(e.what());
      return 0;  // not usable yet (being written): the next change is read again
    } catch (const InputError& e) {
      warnings.push_back(std::string(e.what()) + "; not followed");
      t.refused = true;
      return 0;
    }
    // What is new: past the records handed out when they are the same, else past their steps.
    size_t from = 0;
    const bool prefix = recs.size() >= t.handed.size() &&
                        std::equal(t.handed.begin(), t.handed.end(), recs.begin(),
                                   [](const Key& k, const Record& r) { return k == key_of(r); });
    if (prefix) from = t.handed.size();
    std::vector<Record> fresh;
    for (size_t i = from; i < recs.size(); ++i) {
      const Record& r = recs[i];
      auto it = last_step.find({t.reader->name, r.kind, r.rank});
      if (!prefix && it != last_step.end() && r.step <= it->second) continue;
      fresh.push_back(r);
    }
    t.held.clear();
    if (!final && !fresh.empty()) {
      const int64_t newest = fresh.back().step;
      size_t keep = fresh.size();
      while (keep > 0 && fresh[keep - 1].step == newest) --keep;
      t.held.assign(fresh.begin() + static_cast<long>(keep), fresh.end());
      fresh.resize(keep);
    }
    // Handed out now: everything parsed but the held-back newest step.
    t.handed.clear();
    for (size_t i = 0; i + t.held.size() < recs.size(); ++i) t.handed.push_back(key_of(recs[i]));
    for (const auto& r : fresh) {
      auto& ls = last_step[{t.reader->name, r.kind, r.rank}];
      ls = std::max(ls, r.step);
    }
    const size_t k = fresh.size();
    emit(t, fresh, out);
    return k;
  }
};

Follower::Follower(std::string path, std::string format) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->format = parse_log_format(format);
}
Follower::~Follower() = default;

size_t Follower::poll(std::vector<Record>& out) {
  Impl& m = *impl_;
  m.locate();
  size_t n = 0;
  for (const auto& p : m.order) {
    auto& t = *m.tails[p];
    if (!m.resolve(t)) continue;
    n += t.lines ? m.poll_lines(t, out) : m.poll_whole(t, out, false);
  }
  return n;
}

void Follower::finish(std::vector<Record>& out) {
  Impl& m = *impl_;
  poll(out);
  for (const auto& p : m.order) {
    auto& t = *m.tails[p];
    if (!t.reader) continue;
    std::vector<Record> got;
    if (t.lines) {
      if (!t.partial.empty())
        m.warnings.push_back(fmt::format("{}: last line has no newline (half-written?), {} bytes ignored",
                                         readers::at_line(t.path, t.line_no + 1), t.partial.size()));
      t.lines->finish(got);
    } else {
      got = std::move(t.held);
      t.held.clear();
    }
    m.emit(t, got, out);
  }
}

Warnings Follower::take_warnings() {
  Warnings w;
  w.swap(impl_->warnings);
  return w;
}
std::string Follower::format() const { return impl_->first_format; }
std::vector<std::string> Follower::files() const { return impl_->order; }
int Follower::world_size() const { return impl_->world; }
LogFacts Follower::facts() const { return impl_->facts; }

}  // namespace flatline
