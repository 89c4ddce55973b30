// The corpus of real logs copied from public repositories (tests/data/logs/wild/: each file byte-exact,
// its provenance, its label and what it shows in provenance-*.json), diagnosed as `flatline diagnose`
// does: the score is printed, every file is checked against its recorded sha256, nothing but a
// ReadError comes out of a reader, and the score may not fall below what main scores today.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {
namespace fs = std::filesystem;

// What main scored when the corpus was gathered (README, "Logs from the wild"): a regression fails.
constexpr int kFloorCorrect = 36;

std::string sha256_of(const std::string& path) {
  FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
  char buf[128] = {0};
  const size_t n = fread(buf, 1, 64, p);
  pclose(p);
  return std::string(buf, n);
}

TEST(WildLogs, TheCorpusOfRealLogsIsDiagnosedAsLabelled) {
  const fs::path root = data_dir() + "/logs/wild";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  int n = 0, correct = 0, unhealthy = 0, false_alarms = 0;
  std::string table;
  for (const auto& pf : fs::directory_iterator(root)) {
    const std::string name = pf.path().filename().string();
    if (name.rfind("provenance-", 0) != 0 || pf.path().extension() != ".json") continue;
    for (const auto& e : nlohmann::json::parse(std::ifstream(pf.path()))) {
      const std::string file = (root / e.at("name").get<std::string>() / e.at("file").get<std::string>()).string();
      ASSERT_TRUE(fs::exists(file)) << file;
      EXPECT_EQ(sha256_of(file), e.at("sha256").get<std::string>()) << file << ": not the file its provenance names";
      EXPECT_EQ(e.at("commit").get<std::string>().size(), 40u) << file;
      const std::string label = e.at("label");
      std::string got;
      try {
        got = diagnose(file).cause;
      } catch (const ReadError& err) {
        got = std::string("unreadable: ") + err.what();
      } catch (const std::exception& err) {
        ADD_FAILURE() << file << ": " << err.what();  // only ReadError may come out of a reader
        got = "exception";
      }
      ++n;
      unhealthy += label != "healthy";
      correct += got == label;
      false_alarms += label == "healthy" && got != "healthy" && got.rfind("unreadable", 0) != 0;
      table += (got == label ? "  ok    " : "  MISS  ") + e.at("name").get<std::string>() + "  " + label + "  -> " +
               got.substr(0, 100) + "\n";
    }
  }
  std::printf("real logs from public repositories: %d of %d diagnosed as labelled (%d not healthy; %d false alarm(s) "
              "on healthy logs)\n%s",
              correct, n, unhealthy, false_alarms, table.c_str());
  EXPECT_GE(n, 40);
  EXPECT_GE(unhealthy, 15);
  EXPECT_EQ(false_alarms, 0);
  EXPECT_GE(correct, kFloorCorrect);
}

}  // namespace
}  // namespace flatline::testing
