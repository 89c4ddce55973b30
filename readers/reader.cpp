// The reader registry, format detection and read_log (readers/reader.h, readers/registry.h).
#include "readers/reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "readers/registry.h"
#include "readers/text_util.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

std::deque<ReaderDef>& storage() {
  static std::deque<ReaderDef> r;  // a deque: pointers to its elements stay valid as it grows
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReadError(path + ": cannot open: " + std::strerror(errno));
  std::string s;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (!ec) s.reserve(static_cast<size_t>(size));
  s.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return s;
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
  for (const auto& r : storage())
    if (r.name == def.name) {
      std::fprintf(stderr, "flatline: reader '%s' registered twice\n", def.name.c_str());
      std::abort();
    }
  storage().push_back(def);
  return true;
}

const std::vector<const ReaderDef*>& all_readers() {
  // Rebuilt when a registrar ran since (a static initialiser may ask before every one has run).
  static std::vector<const ReaderDef*> sorted;
  if (sorted.size() != storage().size()) {
    sorted.clear();
    for (const auto& r : storage()) sorted.push_back(&r);
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
    if (!e.is_regular_file(ec)) continue;
    const std::string n = e.path().filename().string();
    for (const auto& g : globs)
      if (glob_match(g, n)) {
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
  for (const ReaderDef* r : all_readers()) {
    const int s = r->sniff ? static_cast<int>(r->sniff(head)) : 0;
    const int h = hinted(*r, name) ? 1 : 0;
    if (s > 0 || h) cs.push_back({r, s, h});
  }
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
  if (refused.size() == 1) throw ReadError(only_error);
  std::string list;
  for (const auto& s : refused) list += (list.empty() ? "" : "; ") + s;
  throw ReadError(path + ": no format could read it (tried " + list + ")");
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

std::vector<Record> merge_by_time(const std::vector<std::vector<Record>>& files) {
  struct Key {
    double t;
    size_t file, idx;
  };
  std::vector<Key> keys;
  for (size_t f = 0; f < files.size(); ++f) {
    double last = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < files[f].size(); ++i) {
      if (std::isfinite(files[f][i].t)) last = files[f][i].t;
      keys.push_back({last, f, i});
    }
  }
  std::stable_sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.t < b.t; });
  std::vector<Record> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(files[k.file][k.idx]);
  return out;
}

namespace {

// The records of several files as one stream. Files whose records name their rank (flatline) are
// checked against their file name; files of a format without ranks take the rank their path names.
void assemble(LogData& d, std::vector<std::vector<Record>>& per_file) {
  const ReaderDef& r = reader_named(d.format);
  int max_rank = -1;
  std::set<int> ranks;
  for (size_t i = 0; i < per_file.size(); ++i) {
    if (r.records_name_rank) {
      const std::string n = fs::path(d.files[i]).stem().string();
      auto named = n.rfind("rank-", 0) == 0 ? readers::parse_integer(n.substr(5)) : std::nullopt;
      int64_t other = 0, other_rank = -1;
      for (const auto& rec : per_file[i]) {
        if (named && rec.rank != *named) ++other, other_rank = rec.rank;
      }
      if (other)
        d.warnings.push_back(fmt::format("{}: {} record(s) of rank {} in the file of rank {} (kept with the rank they name)",
                                         d.files[i], other, other_rank, *named));
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
    d.records = merge_by_time(per_file);
  } else {
    for (auto& v : per_file) d.records.insert(d.records.end(), v.begin(), v.end());
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
  for (const Layout& l : ls) {
    LogData d;
    std::vector<std::vector<Record>> per_file;
    for (const auto& f : l.files) {
      ++tried;
      try {
        const std::string data = read_file(f);
        // A file read as part of a layout keeps that layout's format once the first file settled it,
        // so that a directory's rank files do not end up read by two readers.
        const std::string want = format != "auto" ? format : (d.format != "auto" ? d.format : "auto");
        std::string used;
        auto recs = parse_log_bytes(data, f, want, &d.warnings, &used);
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
    d.warnings.insert(d.warnings.begin(), refused.begin(), refused.end());
    assemble(d, per_file);
    return d;
  }
  if (tried == 1) throw ReadError(last_error);
  throw ReadError(path + ": nothing usable (" + last_error + ")");
}

}  // namespace flatline
