// End to end: `flatline diagnose --follow` on a log another process is writing prints the finding as
// it fires and, with --exit-on-cause, exits 3 on the first checklist cause; on a healthy log it runs
// until --for and exits 0 with the diagnosis. A job's own watchdog can rely on both.
#include <gtest/gtest.h>

#include "tests/e2e/sh.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace {
namespace fs = std::filesystem;

using flatline::e2e::sh;

std::string data(const std::string& rel) {
  const char* d = std::getenv("FLATLINE_TEST_DATA");
  return (d ? std::string(d) : std::string(FLATLINE_SOURCE_DIR) + "/tests/data") + "/logs/" + rel;
}

// Writes `src` to `dst` line by line, `gap` apart (a job logging).
std::thread writer(const std::string& src, const fs::path& dst, std::chrono::milliseconds gap) {
  return std::thread([src, dst, gap] {
    std::ifstream in(src);
    std::ofstream out(dst);
    std::string line;
    while (std::getline(in, line)) {
      out << line << "\n" << std::flush;
      std::this_thread::sleep_for(gap);
    }
  });
}

fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("flatline-e2e-follow-" + std::to_string(std::random_device{}() % 1000000));
  fs::create_directories(d);
  return d;
}

TEST(EndToEndFollow, ExitsWithStatus3OnTheFirstCause) {
  const fs::path d = temp_dir(), log = d / "train.log";
  std::thread w = writer(data("megatron/lr_zero.log"), log, std::chrono::milliseconds(5));
  int st = 0;
  std::string out = sh("diagnose --follow " + log.string() + " --exit-on-cause --poll 0.02 --for 30", &st);
  w.join();
  EXPECT_EQ(st, 3) << out;
  EXPECT_NE(out.find("[step 410] FINDING lr_zero: onset step 400 - lr = 0 since step 400"), std::string::npos) << out;
  EXPECT_NE(out.find("diagnosis: lr_zero"), std::string::npos) << out;
  fs::remove_all(d);
}

TEST(EndToEndFollow, AHealthyLogRunsUntilForAndSaysHealthy) {
  const fs::path d = temp_dir(), log = d / "train.log";
  std::thread w = writer(data("deepspeed/healthy.log"), log, std::chrono::milliseconds(0));
  w.join();
  int st = 0;
  std::string out = sh("diagnose --follow " + log.string() + " --exit-on-cause --poll 0.05 --for 1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_EQ(out.find("FINDING"), std::string::npos) << out;
  EXPECT_NE(out.find("diagnosis: healthy"), std::string::npos) << out;
  fs::remove_all(d);
}

}  // namespace
