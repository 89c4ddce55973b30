// The fuzz regression corpus (tests/data/fuzz/<reader>/, kept from libFuzzer runs of fuzz/): every file
// goes through its reader and the Triage; the only exception allowed out is ReadError (readers/reader.h).
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

TEST(FuzzCorpus, EveryInputReadsOrFailsWithReadError) {
  namespace fs = std::filesystem;
  const fs::path root = data_dir() + "/fuzz";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  size_t files = 0, readers = 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    ++readers;
    const ParseFn parse = parser_for(parse_log_format(dir.path().filename().string()));
    for (const auto& f : fs::directory_iterator(dir.path())) {
      std::ifstream in(f.path(), std::ios::binary);
      const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      Warnings w;
      try {
        auto recs = parse(data, f.path().string(), &w);
        LogData log;
        log.records = std::move(recs);
        (void)replay(log);
      } catch (const ReadError&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << f.path() << ": " << e.what();
      }
      ++files;
    }
  }
  EXPECT_EQ(readers, all_readers().size());  // every registered reader has its corpus
  EXPECT_GT(files, 7u);
}

}  // namespace
}  // namespace flatline::testing
