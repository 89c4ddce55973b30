// Corpus manifests (telemetry/corpus.h): hashes of every scored file, the corpus id, and a changed,
// missing or added file caught by name.
#include "telemetry/corpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace flatline {
namespace {
namespace fs = std::filesystem;

fs::path make_corpus_dir() {
  const fs::path d = fs::temp_directory_path() / ("flatline-corpus-" + std::to_string(std::random_device{}()));
  for (const char* run : {"a", "b"}) {
    fs::create_directories(d / run / "telemetry");
    std::ofstream(d / run / "scenario.yaml") << "name: " << run << "\n";
    std::ofstream(d / run / "manifest.json") << "{\"scenario\": \"" << run << "\"}\n";
    std::ofstream(d / run / "telemetry" / "rank-0.jsonl") << "{\"kind\":\"step\",\"rank\":0,\"step\":1}\n";
    std::ofstream(d / run / "logs.txt") << "not scored\n";
  }
  return d;
}

TEST(Corpus, HashIsXxh3Of128Bits) {
  const fs::path f = fs::temp_directory_path() / ("flatline-hash-" + std::to_string(std::random_device{}()));
  std::ofstream(f) << "";
  EXPECT_EQ(hash_file(f.string()), "99aa06d3014798d86001c324468d497f");  // XXH3_128bits("")
  fs::remove(f);
  EXPECT_THROW(hash_file("/no/such/file"), CorpusError);
}

TEST(Corpus, WrittenCorpusReadsBackAndNamesItsFiles) {
  const fs::path d = make_corpus_dir();
  Corpus c = make_corpus(d.string(), {"a", "b"});
  write_corpus(c, d.string());
  EXPECT_TRUE(is_corpus(d.string()));
  Corpus back = read_corpus(d.string());
  EXPECT_EQ(back.id, c.id);
  EXPECT_EQ(back.id.size(), 32u);
  ASSERT_EQ(back.runs.size(), 2u);
  std::vector<std::string> files;
  for (const auto& [p, h] : back.runs[0].files) files.push_back(p);
  EXPECT_EQ(files, (std::vector<std::string>{"manifest.json", "scenario.yaml", "telemetry/rank-0.jsonl"}));
  EXPECT_EQ(corpus_id({back.runs[1], back.runs[0]}), c.id);  // the order of runs does not matter
  fs::remove_all(d);
}

TEST(Corpus, AChangedMissingOrAddedFileIsCaught) {
  const fs::path d = make_corpus_dir();
  write_corpus(make_corpus(d.string(), {"a", "b"}), d.string());
  std::ofstream(d / "b" / "logs.txt", std::ios::app) << "not scored either\n";
  EXPECT_NO_THROW(read_corpus(d.string()));
  std::ofstream(d / "b" / "telemetry" / "rank-0.jsonl", std::ios::app) << "{}\n";
  try {
    read_corpus(d.string());
    FAIL() << "no error";
  } catch (const CorpusError& e) {
    EXPECT_NE(std::string(e.what()).find("run b: telemetry/rank-0.jsonl changed since it was recorded"),
              std::string::npos)
        << e.what();
  }
  write_corpus(make_corpus(d.string(), {"a", "b"}), d.string());
  fs::remove(d / "a" / "manifest.json");
  try {
    read_corpus(d.string());
    FAIL() << "no error";
  } catch (const CorpusError& e) {
    EXPECT_NE(std::string(e.what()).find("run a: manifest.json is missing"), std::string::npos) << e.what();
  }
  write_corpus(make_corpus(d.string(), {"a", "b"}), d.string());
  std::ofstream(d / "a" / "telemetry" / "rank-1.jsonl") << "\n";
  try {
    read_corpus(d.string());
    FAIL() << "no error";
  } catch (const CorpusError& e) {
    EXPECT_NE(std::string(e.what()).find("run a: telemetry/rank-1.jsonl was not in the recording"), std::string::npos)
        << e.what();
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace flatline
