// A Lightning log directory keeps each run in lightning_logs/version_N/: `flatline diagnose DIR` reads
// the newest version's metrics.csv.
#include <gtest/gtest.h>

#include <filesystem>

#include "detectors/triage.h"
#include "readers/reader.h"

namespace flatline {
namespace {
namespace fs = std::filesystem;

TEST(LightningVersions, TheNewestVersionDirectoryIsRead) {
  const std::string data = std::getenv("FLATLINE_TEST_DATA") ? std::getenv("FLATLINE_TEST_DATA")
                                                              : std::string(FLATLINE_SOURCE_DIR) + "/tests/data";
  const fs::path root = fs::temp_directory_path() / "flatline-lightning-versions";
  fs::remove_all(root);
  for (auto [version, run] : {std::pair<const char*, const char*>{"version_2", "healthy"}, {"version_10", "lr_zero"}}) {
    fs::create_directories(root / "lightning_logs" / version);
    fs::copy_file(data + "/logs/lightning/" + run + "/metrics.csv", root / "lightning_logs" / version / "metrics.csv");
  }
  LogData d = read_log(root.string());
  EXPECT_EQ(d.format, "lightning");
  ASSERT_EQ(d.files.size(), 1u);
  EXPECT_EQ(d.files[0], (root / "lightning_logs" / "version_10" / "metrics.csv").string());  // 10 > 2, not "10" < "2"
  Triage t;
  for (const auto& r : d.records) t.observe(r);
  t.finish(0);
  EXPECT_EQ(t.diagnosis().cause, "lr_zero");
  fs::remove_all(root);
}

}  // namespace
}  // namespace flatline
