// Shared bits of the reader tests: where the fixtures live, temp files, and a one-call diagnosis.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "readers/reader.h"
#include "cli/replay.h"
#include "telemetry/jsonl.h"

namespace flatline::testing {

inline std::string data_dir() {
  const char* d = std::getenv("FLATLINE_TEST_DATA");
  return d ? d : std::string(FLATLINE_SOURCE_DIR) + "/tests/data";
}
inline std::string logs(const std::string& rel) { return data_dir() + "/logs/" + rel; }

// A fresh temp file with `content`; the name keeps `name`'s extension for format detection.
inline std::string temp_file(const std::string& name, const std::string& content) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("flatline-readers-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
  return p.string();
}

// Records as their JSON lines (every field, for comparing two reads of the same log).
inline std::vector<std::string> lines_of(const std::vector<Record>& v) {
  std::vector<std::string> out;
  for (const auto& r : v) out.push_back(to_json(r));
  return out;
}

inline Diagnosis diagnose(const std::string& path, const std::string& f = "auto", Warnings* w = nullptr) {
  return diagnose_log(path, f, w);
}

inline const CheckResult& check_of(const Diagnosis& d, const std::string& cause) {
  for (const auto& c : d.checklist)
    if (c.cause == cause) return c;
  static CheckResult none;
  return none;
}

}  // namespace flatline::testing
