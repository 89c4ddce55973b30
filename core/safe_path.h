// Paths built from input, and the directories flatline may delete (docs/DESIGN.md §9 "Untrusted input").
//  - A name read from a file (a scenario's or run's name in a manifest or corpus.json, a detector's, a
//    format's) becomes at most one path component: check_path_component refuses "", ".", "..", a '/',
//    a NUL or other control character, and more than kMaxNameBytes.
//  - A path built from input is resolved (symbolic links of the parts that exist, then "." and "..")
//    and must stay under the directory it belongs to: path_within.
//  - flatline deletes only a directory it made itself: make_owned_dir writes a marker file into it
//    (kOwnedMarker, holding a line that names flatline), and remove_owned_dir removes a directory only
//    when it is a real directory (not a link to one) holding that marker. std::filesystem::remove_all
//    never follows a symbolic link inside it: a link is removed, never what it points to.
#pragma once
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "core/input_file.h"

namespace flatline {

constexpr size_t kMaxNameBytes = 200;  // a scenario, run or detector name (ext4: 255 bytes a component)

// Throws InputError("<where>: <what> '<name>': <why>") unless `name` is one plain path component.
inline void check_path_component(std::string_view name, const std::string& what, const std::string& where) {
  auto fail = [&](const std::string& why) {
    std::string shown;
    for (char c : name.substr(0, 80)) shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
    throw InputError(where + ": " + what + " '" + shown + (name.size() > 80 ? "...'" : "'") + ": " + why);
  };
  if (name.empty()) fail("is empty");
  if (name == "." || name == "..") fail("is not a name (it would name a directory above or the same one)");
  if (name.size() > kMaxNameBytes) fail("is longer than " + std::to_string(kMaxNameBytes) + " bytes");
  for (char c : name) {
    if (c == '/') fail("holds a '/' (a name is one path component)");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) fail("holds a control character");
  }
}

// `base`/`rel` resolved, which must lie within `base` resolved; throws InputError otherwise.
inline std::string path_within(const std::string& base, const std::string& rel, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path b = fs::weakly_canonical(fs::absolute(base), ec);
  const fs::path p = fs::weakly_canonical(fs::absolute(fs::path(base) / rel), ec);
  if (ec) throw InputError(base + ": " + what + " '" + rel + "': cannot resolve: " + ec.message());
  auto bi = b.begin(), pi = p.begin();
  for (; bi != b.end(); ++bi, ++pi)
    if (pi == p.end() || *bi != *pi) throw InputError(base + ": " + what + " '" + rel + "' lies outside " + b.string());
  return p.string();
}

constexpr const char* kOwnedMarker = ".flatline-owned";

// Creates `dir` (and its parents) as a directory flatline owns and may delete. An existing `dir` must
// be owned already (else InputError: flatline never takes over a directory it did not make).
inline void make_owned_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode) || !fs::exists(fs::path(dir) / kOwnedMarker, ec))
      throw InputError(dir + ": exists and was not made by flatline; refusing to use (and later delete) it");
    return;
  }
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create: " + ec.message());
  std::ofstream(fs::path(dir) / kOwnedMarker) << "made by flatline, which deletes this directory when done\n";
  if (!fs::exists(fs::path(dir) / kOwnedMarker, ec)) throw InputError(dir + ": cannot write " + kOwnedMarker);
}

// A new directory of its own under the system's temporary directory ("<prefix>-XXXXXX", mkdtemp: a
// name no one can have prepared), marked as flatline's (above). Throws InputError.
inline std::string make_owned_temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw InputError(tmpl + ": cannot create a temporary directory: " + std::strerror(errno));
  std::ofstream(std::filesystem::path(tmpl) / kOwnedMarker) << "made by flatline, which deletes this directory when done\n";
  return tmpl;
}

// Removes `dir` when it is a directory flatline made (above); true if it removed it. Anything else
// (a link, a plain directory, nothing) is left alone.
inline bool remove_owned_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) return false;
  struct stat m {};
  if (::lstat((dir + "/" + kOwnedMarker).c_str(), &m) != 0 || !S_ISREG(m.st_mode)) return false;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return !ec;
}

}  // namespace flatline
