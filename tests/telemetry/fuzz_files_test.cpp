// The seeds and finds of the manifest and corpus fuzzers (fuzz/fuzz_file.cpp, tests/data/fuzz-files/):
// each file read as a manifest, or as the corpus.json of a one-run corpus, returns or throws the
// reader's own error (ManifestError/InputError, CorpusError), and the hostile ones throw.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/input_file.h"
#include "telemetry/corpus.h"
#include "telemetry/manifest.h"

namespace flatline {
namespace {
namespace fs = std::filesystem;

fs::path seeds(const std::string& file) {
  const char* d = std::getenv("FLATLINE_TEST_DATA");
  return fs::path(d ? d : FLATLINE_SOURCE_DIR "/tests/data") / "fuzz-files" / file;
}

TEST(FuzzFiles, EveryManifestReadsOrThrowsAManifestError) {
  size_t n = 0, refused = 0;
  for (const auto& f : fs::directory_iterator(seeds("manifest"))) {
    ++n;
    try {
      (void)read_manifest(f.path().string());
    } catch (const InputError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(f.path().string() + ": "), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << f.path() << ": " << e.what();
    }
  }
  EXPECT_GE(n, 5u);
  EXPECT_EQ(refused, n - 1) << "every seed but valid.json is hostile";
  EXPECT_EQ(read_manifest(seeds("manifest/valid.json").string()).faults.at(0).onset_step, 121);
}

TEST(FuzzFiles, EveryCorpusReadsOrThrowsACorpusError) {
  std::string dir = (fs::temp_directory_path() / "flatline-fuzz-files-XXXXXX").string();
  ASSERT_TRUE(mkdtemp(dir.data()));
  fs::create_directories(dir + "/r/telemetry");
  std::ofstream(dir + "/r/manifest.json") << R"({"scenario": "r", "world_size": 1, "steps": 1})";
  std::ofstream(dir + "/r/telemetry/rank-0.jsonl") << R"({"kind":"step","rank":0,"step":1,"loss":1})" << "\n";
  size_t n = 0;
  for (const auto& f : fs::directory_iterator(seeds("corpus"))) {
    ++n;
    fs::copy_file(f.path(), dir + "/corpus.json", fs::copy_options::overwrite_existing);
    try {
      (void)read_corpus(dir);
      ADD_FAILURE() << f.path() << ": read, but no seed matches the run's hashes";
    } catch (const CorpusError& e) {
      EXPECT_NE(std::string(e.what()).find(dir + "/corpus.json"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << f.path() << ": " << e.what();
    }
  }
  EXPECT_GE(n, 4u);
  // The same run, hashed: it reads.
  write_corpus(make_corpus(dir, {"r"}), dir);
  EXPECT_EQ(read_corpus(dir).runs.size(), 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flatline
