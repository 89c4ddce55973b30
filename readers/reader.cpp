// The reader registry, format detection and read_log (readers/reader.h, readers/registry.h).
#include "readers/reader.h"

#include "core/input_file.h"
#include "core/registry.h"

#include <sys/mman.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "readers/csv_table.h"
#include "readers/rank_files.h"
#include "readers/registry.h"
#include "readers/text_util.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

Registry<ReaderDef>& storage() {
  static Registry<ReaderDef> r("reader");  // pointers to its entries stay valid as it grows
  return r;
}


bool hinted(const ReaderDef& r, const std::string& file_name) {
  for (const auto& g : r.name_hints)
    if (glob_match(g, file_name)) return true;
  return false;
}

std::vector<std::string> files_of(const ReaderDef& r, const std::string& dir) {
  return r.locate ? r.locate(dir) : files_matching(dir, r.name_hints);
}

// "x: y" -> "y" when x is the file's own path (a reader's message quoted inside a longer one).
std::string without_path(const std::string& what, const std::string& path) {
  if (what.compare(0, path.size(), path) == 0 && what.size() > path.size() + 1 && what[path.size()] == ':')
    return std::string(readers::trim(std::string_view(what).substr(path.size() + 1)));
  return what;
}

}  // namespace

bool register_reader(const ReaderDef& def) {
  storage().add(def.name, def);
  return true;
}

const std::vector<const ReaderDef*>& all_readers() {
  // Rebuilt when a registrar ran since (a static initialiser may ask before every one has run).
  static std::vector<const ReaderDef*> sorted;
  if (sorted.size() != storage().size()) {
    sorted.clear();
    for (const auto& [name, r] : storage()) sorted.push_back(&r);
    std::sort(sorted.begin(), sorted.end(), [](const ReaderDef* a, const ReaderDef* b) {
      return a->priority != b->priority ? a->priority < b->priority : a->name < b->name;
    });
  }
  return sorted;
}

std::string format_choices() {
  std::string all = "auto";
  for (const ReaderDef* r : all_readers()) all += "|" + r->name;
  return all;
}

const ReaderDef& reader_named(const std::string& name) {
  for (const ReaderDef* r : all_readers())
    if (r->name == name) return *r;
  throw std::invalid_argument("unknown log format '" + name + "' (expected " + format_choices() + ")");
}

std::string parse_log_format(const std::string& s) {
  if (s != "auto") (void)reader_named(s);
  return s;
}

ParseFn parser_for(const std::string& format) { return format == "auto" ? nullptr : reader_named(format).parse; }

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative '*' matching with one backtrack point (enough for shell-style globs).
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi, ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<std::string> files_matching(const std::string& dir, const std::vector<std::string>& globs) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    // Not only regular files: a FIFO, a device or a link that matches is listed, so that reading it is
    // refused with its reason (core/input_file.h) instead of the run being read without it.
    // A directory is listed only under a file's name ("rank-0.jsonl", "train.log": a glob with an
    // extension), where a log was expected and a directory found is said so; other directories (a
    // TensorBoard run's, "*tfevents*") are walked by the readers that want them.
    const bool dir = fs::is_directory(e.symlink_status(ec));
    const std::string n = e.path().filename().string();
    for (const auto& g : globs)
      if ((!dir || g.find('.') != std::string::npos) && glob_match(g, n)) {
        out.push_back(e.path().string());
        break;
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int rank_from_path(const std::string& path) {
  for (const auto& part : fs::path(path)) {
    std::string n = part.string();
    if (n.rfind("rank", 0) != 0) continue;
    n = n.substr(4);
    if (!n.empty() && (n[0] == '_' || n[0] == '-')) n = n.substr(1);
    const auto dot = n.find('.');
    if (dot != std::string::npos) n = n.substr(0, dot);
    if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos) continue;
    return std::atoi(n.c_str());
  }
  return -1;
}

std::vector<const ReaderDef*> candidates(const std::string& path, std::string_view head) {
  const std::string name = fs::path(path).filename().string();
  struct C {
    const ReaderDef* r;
    int sniff, hint;
  };
  std::vector<C> cs;
  // The first 64 KiB decide almost every file; only when no sniffer is sure or likely there is the
  // rest of the head looked at (a Megatron log's argument dump): sniffing is a scan per pattern.
  auto sniff_all = [&](std::string_view h) {
    cs.clear();
    int best = 0;
    for (const ReaderDef* r : all_readers()) {
      const int s = r->sniff ? static_cast<int>(r->sniff(h)) : 0;
      const int hn = hinted(*r, name) ? 1 : 0;
      if (s > 0 || hn) cs.push_back({r, s, hn});
      best = std::max(best, s);
    }
    return best;
  };
  constexpr size_t kFirst = 64 << 10;
  if (sniff_all(head.substr(0, kFirst)) < static_cast<int>(Sniff::likely) && head.size() > kFirst) sniff_all(head);
  std::stable_sort(cs.begin(), cs.end(), [](const C& a, const C& b) {
    return a.sniff != b.sniff ? a.sniff > b.sniff : a.hint > b.hint;  // then priority (stable)
  });
  std::vector<const ReaderDef*> out;
  for (const auto& c : cs) out.push_back(c.r);
  return out;
}

std::string detect_format(const std::string& path, std::string_view head) {
  auto c = candidates(path, head.substr(0, kSniffBytes));
  return c.empty() ? "auto" : c.front()->name;
}

std::vector<Record> parse_log_bytes(std::string_view data, const std::string& path, const std::string& format,
                                    Warnings* w, std::string* used) {
  if (data.empty()) throw ReadError(path + ": empty file");
  std::vector<const ReaderDef*> cands;
  if (format != "auto") cands.push_back(&reader_named(format));
  else cands = candidates(path, data.substr(0, kSniffBytes));
  if (cands.empty()) {
    std::string names = format_choices();
    names = names.substr(names.find('|') + 1);
    throw ReadError(path + ": unknown log format (force one with --format " + names + ")");
  }
  std::vector<std::string> refused;
  std::string only_error;
  for (const ReaderDef* r : cands) {
    Warnings mine;
    std::vector<Record> recs;
    try {
      readers::WarningSink sink(&mine, path);
      recs = r->parse(data, path, sink.get());
    } catch (const ReadError& e) {
      only_error = e.what();
      refused.push_back(r->name + ": " + without_path(e.what(), path));
      continue;
    }
    if (recs.empty()) {
      only_error = path + ": no usable records as " + r->name;
      refused.push_back(r->name + ": no usable records");
      continue;
    }
    if (w) w->insert(w->end(), mine.begin(), mine.end());
    if (used) *used = r->name;
    return recs;
  }
  // A table: say what its header holds, and what a table needs.
  std::string columns;
  for (const auto& c : readers::header_columns(data.substr(0, kSniffBytes))) columns += (columns.empty() ? "" : ", ") + c;
  if (!columns.empty())
    columns = " (its columns: " + columns + "; a table needs a loss column, e.g. loss or train_loss, and a step, an epoch or its rows)";
  if (refused.size() == 1) throw ReadError(only_error + columns);
  std::string list;
  for (const auto& s : refused) list += (list.empty() ? "" : "; ") + s;
  throw ReadError(path + ": no format could read it (tried " + list + ")" + columns);
}

namespace {

// One directory layout: a reader and the files it would read.
struct Layout {
  const ReaderDef* reader;
  std::vector<std::string> files;
};

std::vector<Layout> layouts(const std::string& dir, const std::string& format) {
  std::vector<Layout> out;
  std::set<std::string> taken;
  for (const ReaderDef* r : all_readers()) {
    if (format != "auto" && r->name != format) continue;
    std::vector<std::string> files;
    for (auto& f : files_of(*r, dir))
      if (taken.insert(f).second) files.push_back(std::move(f));
    if (!files.empty()) out.push_back({r, std::move(files)});
  }
  return out;
}

std::string all_hints() {
  std::string s;
  std::set<std::string> seen;
  for (const ReaderDef* r : all_readers())
    for (const auto& h : r->name_hints)
      if (seen.insert(h).second) s += (s.empty() ? "" : ", ") + h;
  return s;
}

}  // namespace

LogFiles locate_log(const std::string& path, const std::string& format) {
  if (format != "auto") (void)reader_named(format);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ReadError(path + ": no such file or directory");
  if (!fs::is_directory(path, ec)) return {format, {path}};
  auto ls = layouts(path, format);
  if (ls.empty()) throw ReadError(path + ": no log found (" + all_hints() + ")");
  return {format, ls.front().files};
}

std::vector<Record> merge_by_time(std::vector<std::vector<Record>> files) {
  // Each record's key: its t, or the last t before it in its file.
  std::vector<std::vector<double>> keys(files.size());
  bool sorted = true;
  size_t total = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    double last = -std::numeric_limits<double>::infinity();
    keys[f].reserve(files[f].size());
    for (const Record& r : files[f]) {
      if (std::isfinite(r.t)) last = r.t;
      sorted &= keys[f].empty() || keys[f].back() <= last;
      keys[f].push_back(last);
    }
    total += files[f].size();
  }
  if (sorted && files.size() == 1) return std::move(files[0]);  // (already in order: nothing to move)
  std::vector<Record> out;
  out.reserve(total);
  if (sorted) {
    // Every file in time order (the telemetry's t never goes back): a k-way merge, the lowest file
    // index first on ties (what a stable sort of the concatenation gives).
    std::vector<size_t> at(files.size(), 0);
    auto later = [&](size_t a, size_t b) {
      const double ka = keys[a][at[a]], kb = keys[b][at[b]];
      return ka != kb ? ka > kb : a > b;
    };
    std::vector<size_t> heap;
    for (size_t f = 0; f < files.size(); ++f)
      if (!files[f].empty()) heap.push_back(f);
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const size_t f = heap.back();
      out.push_back(std::move(files[f][at[f]]));
      if (++at[f] < files[f].size()) std::push_heap(heap.begin(), heap.end(), later);
      else heap.pop_back();
    }
    return out;
  }
  struct Key {
    double t;
    size_t file, idx;
  };
  std::vector<Key> all;
  all.reserve(total);
  for (size_t f = 0; f < files.size(); ++f)
    for (size_t i = 0; i < files[f].size(); ++i) all.push_back({keys[f][i], f, i});
  std::stable_sort(all.begin(), all.end(), [](const Key& a, const Key& b) { return a.t < b.t; });
  for (const auto& k : all) out.push_back(std::move(files[k.file][k.idx]));
  return out;
}

namespace {

using namespace rank_files;

// Memory about to be written once, in full (a run's records: ~90 MB for 8 ranks x 20,000 steps), faulted
// in 2 MiB at a time where the kernel offers transparent huge pages (madvise mode) rather than 4 KiB
// at a time: 4 KiB faults were a third of the time of reading a run whole. Advice only: nothing
// changes where it is not taken.
void huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

// Puts records[i] in merge_by_time's order when their files' t went back somewhere: by (key, file,
// position), the key being the last finite t of the record's file so far (`from`: each record's file;
// records keep their file's order). The k-way merge leaves them sorted but for the records near where
// a t went back (a heartbeat stamped just before the step logged before it): an insertion sort of
// their positions, bounded (a file read backwards is sorted outright instead), then each displaced
// record moved once, along its cycle.
void reorder(std::vector<Record>& records, const std::vector<uint32_t>& from, size_t n_files) {
  const size_t n = records.size();
  std::vector<double> key(n);
  std::vector<double> last(n_files, -std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(records[i].t)) last[from[i]] = records[i].t;
    key[i] = last[from[i]];
  }
  auto less = [&](size_t a, size_t b) {
    return key[a] != key[b] ? key[a] < key[b] : from[a] != from[b] ? from[a] < from[b] : a < b;
  };
  std::vector<size_t> at(n);  // at[p]: the position whose record goes to p
  for (size_t i = 0; i < n; ++i) at[i] = i;
  size_t shifts = 0;
  for (size_t i = 1; i < n && shifts <= n; ++i)
    for (size_t j = i; j > 0 && less(at[j], at[j - 1]) && shifts <= n; --j, ++shifts) std::swap(at[j], at[j - 1]);
  if (shifts > n) std::sort(at.begin(), at.end(), less);
  for (size_t s = 0; s < n; ++s) {
    if (at[s] == s) continue;
    Record held = std::move(records[s]);
    size_t p = s;
    for (;;) {
      const size_t q = at[p];
      at[p] = p;
      if (q == s) {
        records[p] = std::move(held);
        break;
      }
      records[p] = std::move(records[q]);
      p = q;
    }
  }
}

// flatline rank files read as read_log reads them file by file and merge_by_time merges them, without
// holding each file's records first: every file streamed a chunk at a time (JsonlReader), its records
// moved once, into the result, by the same k-way merge (reorder() where a t went back). Before, a run's
// records were written twice and moved once more: the read of a whole run ran at half the streamed
// speed. Files without a record are refused as read_log refuses them. Returns false when a file cannot
// be read through (an error: read one by one, the first file to fail names it); the caller then reads
// them one by one.
struct MergedRanks {
  std::vector<std::string> files;  // those with records
  std::vector<Record> records;
  Warnings warnings;               // each file's, in file order
  Warnings refused;                // "<file>: no usable records as flatline"
  Warnings other_ranks;            // records of another rank in a rank's file
  int world_size = 0;
};
bool merge_rank_files(const std::vector<std::string>& paths, MergedRanks& m) try {
  struct Cursor {
    std::unique_ptr<JsonlReader> in;
    Record head;  // the file's next record, parsed in place (JsonlReader::next_record, docs/DESIGN.md §10), moved once
    double key = -std::numeric_limits<double>::infinity();  // merge_by_time's: the last t so far
    Warnings warnings;
    int64_t records = 0, other = 0;
    int other_rank = -1;
  };
  std::vector<Cursor> cs(paths.size());
  bool sorted = true;
  auto advance = [&sorted](Cursor& c) {  // to the file's next record (c.head a default Record); false at its end
    if (!c.in->next_record(c.head, &c.warnings)) return false;
    const double t = c.head.t;
    if (std::isfinite(t)) sorted &= c.key <= t, c.key = t;
    return true;
  };
  double expect = 16;
  std::vector<size_t> heap;
  for (size_t f = 0; f < paths.size(); ++f) {
    std::optional<uint64_t> size;
    cs[f].in = open_reader(paths[f], paths.size(), &size);
    if (!advance(cs[f])) continue;
    heap.push_back(f);
    // The result is sized once, from each file's first chunk (lines per byte): a larger vector only
    // reserves address space.
    if (size) expect += 1 + cs[f].in->lines_per_byte() * static_cast<double>(*size) * 1.05;
  }
  m.records.reserve(static_cast<size_t>(expect));
  huge_pages(m.records.data(), m.records.capacity() * sizeof(Record));
  std::vector<uint32_t> from;  // each record's file, for reorder()
  from.reserve(static_cast<size_t>(expect));
  auto later = [&cs](size_t a, size_t b) { return cs[a].key != cs[b].key ? cs[a].key > cs[b].key : a > b; };
  std::make_heap(heap.begin(), heap.end(), later);
  int max_rank = -1;
  std::vector<std::optional<int64_t>> named(paths.size());
  for (size_t f = 0; f < paths.size(); ++f) named[f] = named_rank(paths[f]);
  while (!heap.empty()) {
    const size_t f = heap.front();
    Cursor& c = cs[f];
    Record& r = c.head;
    ++c.records;
    if (named[f] && r.rank != *named[f]) ++c.other, c.other_rank = r.rank;
    max_rank = std::max(max_rank, r.rank);
    m.records.push_back(std::move(r));
    reset(r);
    from.push_back(static_cast<uint32_t>(f));
    if (!advance(c)) {
      heap.front() = heap.back();
      heap.pop_back();
      if (heap.empty()) break;
    }
    sift_top(heap, later);
  }
  if (!sorted) reorder(m.records, from, paths.size());
  for (size_t f = 0; f < paths.size(); ++f) {
    Cursor& c = cs[f];
    m.warnings.insert(m.warnings.end(), c.warnings.begin(), c.warnings.end());
    if (c.records == 0) {
      m.refused.push_back(paths[f] + ": no usable records as flatline");
      continue;
    }
    m.files.push_back(paths[f]);
    if (c.other) m.other_ranks.push_back(other_rank_warning(paths[f], c.other, c.other_rank, *named[f]));
  }
  m.world_size = std::max<int>(static_cast<int>(m.files.size()), max_rank + 1);
  return true;
} catch (const std::exception&) {
  return false;
}

// The records of several files as one stream. Files whose records name their rank (flatline) are
// checked against their file name; files of a format without ranks take the rank their path names.
void assemble(LogData& d, std::vector<std::vector<Record>>& per_file) {
  const ReaderDef& r = reader_named(d.format);
  int max_rank = -1;
  std::set<int> ranks;
  for (size_t i = 0; i < per_file.size(); ++i) {
    if (r.records_name_rank) {
      const auto named = named_rank(d.files[i]);
      int64_t other = 0;
      int other_rank = -1;
      for (const auto& rec : per_file[i]) {
        if (named && rec.rank != *named) ++other, other_rank = rec.rank;
      }
      if (other) d.warnings.push_back(other_rank_warning(d.files[i], other, other_rank, *named));
    } else if (const int pr = rank_from_path(d.files[i]); pr >= 0 && per_file.size() > 1) {
      for (auto& rec : per_file[i]) rec.rank = pr;
    }
    for (const auto& rec : per_file[i]) {
      max_rank = std::max(max_rank, rec.rank);
      ranks.insert(rec.rank);
    }
  }
  if (r.records_name_rank || ranks.size() > 1) {
    d.world_size = std::max<int>(r.records_name_rank ? static_cast<int>(per_file.size()) : 0, max_rank + 1);
    d.records = merge_by_time(std::move(per_file));
  } else if (per_file.size() == 1) {
    d.records = std::move(per_file[0]);
  } else {
    for (auto& v : per_file)
      d.records.insert(d.records.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  }
}

}  // namespace

LogData read_log(const std::string& path, const std::string& format) {
  if (format != "auto") (void)reader_named(format);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ReadError(path + ": no such file or directory");
  std::vector<Layout> ls;
  if (fs::is_directory(path, ec)) {
    ls = layouts(path, format);
    if (ls.empty()) throw ReadError(path + ": no log found (" + all_hints() + ")");
  } else {
    ls.push_back({nullptr, {path}});
  }
  std::string last_error;
  size_t tried = 0;
  Warnings refused;  // files no reader could read, in this layout or an earlier one
  // The warnings every read layout ends with: the files refused so far first, then the other layouts.
  auto warn_around = [&](LogData& d, const Layout& l) {
    d.warnings.insert(d.warnings.begin(), refused.begin(), refused.end());
    // A directory holding logs of more than one format: one is read, and the others are named, not
    // passed over in silence.
    for (const Layout& other : ls)
      if (&other != &l && other.reader && other.reader->name != d.format)
        d.warnings.push_back(fmt::format("{}: also holds {} log(s) ({}{}): not read; --format {} reads them instead", path,
                                         other.reader->name, fs::path(other.files.front()).filename().string(),
                                         other.files.size() > 1 ? fmt::format(" and {} more", other.files.size() - 1) : "",
                                         other.reader->name));
  };
  for (const Layout& l : ls) {
    LogData d;
    // flatline rank files: merged as they are read (merge_rank_files), unless that would read them
    // otherwise than one by one.
    MergedRanks m;
    if (l.files.size() > 1 && (format == "flatline" || (format == "auto" && l.reader && l.reader->name == "flatline")) &&
        merge_rank_files(l.files, m)) {
      tried += l.files.size();
      refused.insert(refused.end(), m.refused.begin(), m.refused.end());
      if (!m.refused.empty()) last_error = m.refused.back();
      if (m.files.empty()) continue;
      d.format = "flatline";
      d.files = std::move(m.files);
      d.records = std::move(m.records);
      d.warnings = std::move(m.warnings);
      d.world_size = m.world_size;
      warn_around(d, l);
      d.warnings.insert(d.warnings.end(), m.other_ranks.begin(), m.other_ranks.end());
      return d;
    }
    std::vector<std::vector<Record>> per_file;
    for (const auto& f : l.files) {
      ++tried;
      try {
        // A file read as part of a layout keeps that layout's format once the first file settled it,
        // so that a directory's rank files do not end up read by two readers.
        const std::string want = format != "auto" ? format : (d.format != "auto" ? d.format : "auto");
        std::string used;
        std::vector<Record> recs;
        if (want == "flatline" || (want == "auto" && l.reader && l.reader->name == "flatline")) {
          // flatline telemetry is streamed (telemetry/jsonl.h): its memory is the records, never the file
          recs = read_jsonl(f, &d.warnings);
          if (recs.empty()) throw ReadError(f + ": no usable records as flatline");
          used = "flatline";
        } else {
          const std::string data = readers::read_file(f);
          recs = parse_log_bytes(data, f, want, &d.warnings, &used);
          if (const ReaderDef& rd = reader_named(used); rd.facts)
            d.facts.planned_steps = std::max(d.facts.planned_steps, rd.facts(data).planned_steps);
        }
        if (d.format == "auto") d.format = used;
        d.files.push_back(f);
        per_file.push_back(std::move(recs));
      } catch (const ReadError& e) {
        if (ls.size() == 1 && l.files.size() == 1) throw;
        refused.push_back(e.what());
        last_error = e.what();
      }
    }
    if (per_file.empty()) continue;
    warn_around(d, l);
    assemble(d, per_file);
    return d;
  }
  if (tried == 1) throw ReadError(last_error);
  throw ReadError(path + ": nothing usable (" + last_error + ")");
}

}  // namespace flatline
