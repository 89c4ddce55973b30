// What the adversarial tests share (docs/DESIGN.md §9 "Untrusted input"): a recorded suite to tamper
// with (the synthetic fixture runs of tests/report: no training), ways to tamper with a run's manifest
// and telemetry, and a flatline command run under a hard time limit, so that an attack that makes
// flatline hang fails its test (status 124) instead of blocking the test run.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "telemetry/corpus.h"
#include "tests/e2e/helpers.h"
#include "tests/report/fixtures.h"

namespace flatline::attack {
namespace fs = std::filesystem;
using e2e::Ran;
using nlohmann::json;

// The runs write_fixture_suite writes (sorted as flatline lists them).
inline const std::vector<std::string>& fixture_runs() {
  static const std::vector<std::string> runs = {"a-lr-zero", "b-zero-grad-rank", "c-data-replay", "d-healthy"};
  return runs;
}

// `flatline ARGS` with stdout and stderr, killed after `limit_s` (status 124: it hung; 137: it ignored
// SIGTERM too). `input` (a shell word list) is piped to its stdin when not empty.
// `env` ("NAME=value ...") is set for it.
inline Ran flatline_within(const std::string& args, double limit_s = 60, const std::string& input = "",
                           const std::string& env = "") {
  const std::string limit = "timeout -k 3 " + std::to_string(static_cast<int>(limit_s));
  return e2e::run(args, (input.empty() ? "" : input + " | ") + (env.empty() ? "" : "env " + env + " ") + limit);
}

// A fresh recorded suite (4 runs on 2 ranks, 200 steps) in a scratch directory of its own; with
// `corpus`, a corpus.json over it as `flatline score --out` writes one.
inline std::string fresh_suite(bool corpus = false) {
  const std::string dir = testing::write_fixture_suite(testing::scratch_dir("attack"));
  if (corpus) write_corpus(make_corpus(dir, fixture_runs()), dir);
  std::ofstream(dir + "/answers.txt") << "quit\n";  // a drill's scripted answers
  return dir;
}
// Re-hashes the corpus after a tampering: what an attacker does, since the id is no signature.
inline void rehash(const std::string& suite) { write_corpus(make_corpus(suite, fixture_runs()), suite); }

inline json read_manifest_json(const std::string& run) { return json::parse(std::ifstream(run + "/manifest.json")); }
inline void write_manifest_json(const std::string& run, const json& j) { std::ofstream(run + "/manifest.json") << j.dump(2); }
// Sets one manifest field (a JSON pointer such as "/scenario" or "/faults/0/cause").
inline void set_manifest(const std::string& run, const std::string& pointer, const json& value) {
  json j = read_manifest_json(run);
  j[json::json_pointer(pointer)] = value;
  write_manifest_json(run, j);
}

// The ways a telemetry file can be something other than a recorded file.
enum class Bad { fifo, link_to_passwd, link_to_kmsg, directory, sparse, endless_line };
inline const char* name_of(Bad b) {
  switch (b) {
    case Bad::fifo: return "a FIFO";
    case Bad::link_to_passwd: return "a link to /etc/passwd";
    case Bad::link_to_kmsg: return "a link to /proc/kmsg";
    case Bad::directory: return "a directory";
    case Bad::sparse: return "a 2 GiB sparse file";
    case Bad::endless_line: return "a 20 MB line without a newline";
  }
  return "?";
}
// What flatline must say of it (a part of the error).
inline const char* reason_of(Bad b) {
  switch (b) {
    case Bad::fifo: return "is a FIFO (named pipe); only a regular file is read";
    case Bad::link_to_passwd:
    case Bad::link_to_kmsg: return "is a symbolic link; only a regular file is read";
    case Bad::directory: return "is a directory; only a regular file is read";
    case Bad::sparse: return "is sparse (";
    case Bad::endless_line: return "without a newline; a record line is at most 1.0 MiB";
  }
  return "?";
}
// Makes `path` (an existing file) into `b`.
inline void make_bad(const std::string& path, Bad b) {
  fs::remove(path);
  switch (b) {
    case Bad::fifo: ASSERT_EQ(mkfifo(path.c_str(), 0644), 0); break;
    case Bad::link_to_passwd: fs::create_symlink("/etc/passwd", path); break;
    case Bad::link_to_kmsg: fs::create_symlink("/proc/kmsg", path); break;
    case Bad::directory: fs::create_directories(path + "/inside"); break;
    case Bad::sparse: {
      std::ofstream(path) << "{\"kind\":\"step\",\"rank\":0,\"step\":1}\n";
      fs::resize_file(path, 2ull << 30);
      break;
    }
    case Bad::endless_line: std::ofstream(path) << std::string(20'000'000, 'x'); break;
  }
}
inline const std::vector<Bad>& every_bad() {
  static const std::vector<Bad> all = {Bad::fifo,      Bad::link_to_passwd, Bad::link_to_kmsg,
                                       Bad::directory, Bad::sparse,         Bad::endless_line};
  return all;
}

// A tree's files and their contents (a victim directory an attack must leave alone).
inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().string()] = e2e::read_file(e.path().string());
  return out;
}

}  // namespace flatline::attack
