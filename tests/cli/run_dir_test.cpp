// A run directory's claim and lock (cli/run_dir.h): only run directories are replaced, decided by more
// than a file name; a directory another run holds is refused with its pid; the claim empties it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "cli/run_dir.h"
#include "faults/fault.h"
#include "telemetry/manifest.h"

namespace flatline {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir() {
  static std::mt19937_64 rng(std::random_device{}());
  auto d = fs::temp_directory_path() / ("flatline-run-dir-test-" + std::to_string(rng() % 100000000));
  fs::remove_all(d);
  return d.string();
}

void a_finished_run(const std::string& dir) {
  fs::create_directories(dir + "/telemetry");
  std::ofstream(dir + "/telemetry/rank-0.jsonl") << "{}\n";
  Manifest m;
  m.scenario = "x";
  m.versions = "flatline 0.1.0; libtorch";
  write_manifest(m, dir + "/manifest.json");
}

std::string refusal(const std::string& dir) {
  try {
    RunDirLock l = claim_run_dir(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(RunDir, AnAbsentDirectoryIsCreatedAndLocked) {
  const std::string d = fresh_dir();
  RunDirLock l = claim_run_dir(d);
  EXPECT_TRUE(fs::is_directory(d));
  std::ifstream in(d + "/.lock");
  std::string first, pid;
  std::getline(in, first);
  std::getline(in, pid);
  EXPECT_EQ(first, "flatline run lock");
  EXPECT_EQ(pid, "pid " + std::to_string(getpid()));
}

TEST(RunDir, ADirectoryInUseIsRefusedWithTheHoldersPidUntilItIsReleased) {
  const std::string d = fresh_dir();
  {
    RunDirLock first = claim_run_dir(d);
    std::ofstream(d + "/notes.txt") << "x";  // whatever the first run's directory holds, it is in use
    const std::string why = refusal(d);
    EXPECT_NE(why.find(d + ": in use by another flatline run (pid " + std::to_string(getpid()) + ")"),
              std::string::npos) << why;
    EXPECT_TRUE(fs::exists(d + "/notes.txt")) << "the refused claim must not touch the first run's files";
    fs::remove(d + "/notes.txt");
    a_finished_run(d);
  }
  EXPECT_EQ(refusal(d), "");  // released with the first lock
}

TEST(RunDir, AnOldRunIsEmptiedButNotItsLockFile) {
  const std::string d = fresh_dir();
  a_finished_run(d);
  fs::create_directories(d + "/checkpoints/step-00000010");
  {
    RunDirLock l = claim_run_dir(d);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(d)) left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{".lock"});
  }
}

TEST(RunDir, AForeignFileIsNeverReplaced) {
  const std::string d = fresh_dir();
  a_finished_run(d);
  std::ofstream(d + "/precious.txt") << "keep me";
  const std::string why = refusal(d);
  EXPECT_NE(why.find("is not a flatline run directory (it holds 'precious.txt', which no flatline run writes)"),
            std::string::npos) << why;
  EXPECT_TRUE(fs::exists(d + "/precious.txt"));
  EXPECT_TRUE(fs::exists(d + "/manifest.json"));
}

TEST(RunDir, AFileNamedManifestJsonIsNotEnough) {
  const std::string d = fresh_dir();
  fs::create_directories(d);
  std::ofstream(d + "/manifest.json") << "{\"name\": \"my notes\"}";
  std::string why = refusal(d);
  EXPECT_NE(why.find("its manifest.json is not a flatline manifest"), std::string::npos) << why;
  std::ofstream(d + "/manifest.json") << "{\"scenario\": \"x\", \"versions\": \"someone else 2.0\"}";
  why = refusal(d);
  EXPECT_NE(why.find("does not come from flatline (versions 'someone else 2.0')"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(d + "/manifest.json"));
}

TEST(RunDir, ARunThatDiedBeforeItsManifestIsStillARunByItsLockFile) {
  const std::string d = fresh_dir();
  fs::create_directories(d + "/telemetry");
  std::ofstream(d + "/.lock") << "flatline run lock\npid 1\n";
  EXPECT_EQ(not_a_run_dir(d), "");
  std::ofstream(d + "/.lock") << "something else\n";
  EXPECT_EQ(not_a_run_dir(d), "it has no manifest.json and no flatline lock file");
}

TEST(RunDir, AFileInPlaceOfTheDirectoryIsRefused) {
  const std::string d = fresh_dir();
  std::ofstream(d) << "x";
  EXPECT_NE(refusal(d).find("it is not a directory"), std::string::npos);
  fs::remove(d);
}

}  // namespace
}  // namespace flatline
