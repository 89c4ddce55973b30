// Reader registration: each reader file ends with FLATLINE_REGISTER_READER(def) (def: a ReaderDef,
// usually built by a function of that file) so that read_log,
// format detection, `--format` and the fuzz targets find it (readers/reader.h). flatline_core is a
// shared library (and the fuzz build an OBJECT library), so every registrar is kept by the linker.
#pragma once
#include "readers/reader.h"

namespace flatline {

// Returns true (for the static initialiser). A second reader with the same name is a broken invariant
// (core/registry.h): the program ends at start-up saying so, rather than one shadowing the other.
bool register_reader(const ReaderDef& def);

// The regular files of `dir` whose names match one of `globs` ('*' and '?'), sorted by name.
std::vector<std::string> files_matching(const std::string& dir, const std::vector<std::string>& globs);
bool glob_match(std::string_view pattern, std::string_view name);

}  // namespace flatline

#define FLATLINE_READER_CONCAT_(a, b) a##b
#define FLATLINE_READER_CONCAT(a, b) FLATLINE_READER_CONCAT_(a, b)
#define FLATLINE_REGISTER_READER(def) \
  static const bool FLATLINE_READER_CONCAT(flatline_reader_registered_, __LINE__) = ::flatline::register_reader(def)
