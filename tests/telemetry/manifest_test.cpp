// Manifest (a run's ground truth): write/read round trip, and errors that name the file.
#include "telemetry/manifest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace flatline {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "flatline_manifest_" + name + "_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
}

Manifest example() {
  Manifest m;
  m.scenario = "lr-cosine-sized-for-400-of-1000";
  m.source = "scenarios/main/lr_zero_total.yaml";
  m.resolved_yaml = "name: lr-cosine-sized-for-400-of-1000\nseed: 7\n";
  m.seed = 0xffffffffffffffffULL;  // the full uint64 range survives JSON
  m.world_size = 2;
  m.steps = 1000;
  m.versions = "flatline 0.1.0; libtorch 2.1";
  m.faults.push_back({"lr_zero", "schedule_total_too_short", -1, 52, 400, 81.25});
  m.faults.push_back({"zero_grad_rank", "zeroed_buffer", 1, 600, 600, std::nan("")});
  m.expect_cause = "lr_zero";
  m.expect_rank = -1;
  m.expect_within_steps = 7;
  m.status = "failed";
  m.error = "rank 1: \"collective timeout\"\nafter 30 s";
  m.wall_s = 93.5;
  return m;
}

TEST(Manifest, WriteReadRoundTrip) {
  std::string path = temp_path("rt");
  Manifest m = example();
  write_manifest(m, path);
  Manifest b = read_manifest(path);
  EXPECT_EQ(b.scenario, m.scenario);
  EXPECT_EQ(b.source, m.source);
  EXPECT_EQ(b.resolved_yaml, m.resolved_yaml);
  EXPECT_EQ(b.seed, m.seed);
  EXPECT_EQ(b.world_size, 2);
  EXPECT_EQ(b.steps, 1000);
  EXPECT_EQ(b.versions, m.versions);
  ASSERT_EQ(b.faults.size(), 2u);
  EXPECT_EQ(b.faults[0].kind, "lr_zero");
  EXPECT_EQ(b.faults[0].mode, "schedule_total_too_short");
  EXPECT_EQ(b.faults[0].rank, -1);
  EXPECT_EQ(b.faults[0].active_from, 52);
  EXPECT_EQ(b.faults[0].onset_step, 400);
  EXPECT_EQ(b.faults[0].onset_t, 81.25);
  EXPECT_EQ(b.faults[1].kind, "zero_grad_rank");
  EXPECT_EQ(b.faults[1].rank, 1);
  EXPECT_TRUE(std::isnan(b.faults[1].onset_t));  // unknown onset time stays unknown
  EXPECT_EQ(b.expect_cause, "lr_zero");
  EXPECT_EQ(b.expect_rank, -1);
  EXPECT_EQ(b.expect_within_steps, 7);
  EXPECT_EQ(b.status, "failed");
  EXPECT_EQ(b.error, m.error);
  EXPECT_EQ(b.wall_s, 93.5);
  // No temporary left behind.
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
}

TEST(Manifest, HealthyRunWithDefaults) {
  std::string path = temp_path("healthy");
  Manifest m;
  m.scenario = "clean";
  write_manifest(m, path);
  Manifest b = read_manifest(path);
  EXPECT_EQ(b.scenario, "clean");
  EXPECT_TRUE(b.faults.empty());
  EXPECT_EQ(b.expect_cause, "healthy");
  EXPECT_EQ(b.status, "running");
  EXPECT_EQ(b.error, "");
}

TEST(Manifest, RewriteReplacesTheFile) {
  std::string path = temp_path("rewrite");
  Manifest m = example();
  m.status = "running";
  write_manifest(m, path);
  m.status = "completed";
  m.error.clear();
  write_manifest(m, path);
  Manifest b = read_manifest(path);
  EXPECT_EQ(b.status, "completed");
  EXPECT_EQ(b.error, "");
}

TEST(Manifest, InvalidUtf8InTheErrorIsReplacedNotThrown) {
  std::string path = temp_path("utf8");
  Manifest m = example();
  m.error = "died: \xff\xfe";
  ASSERT_NO_THROW(write_manifest(m, path));
  EXPECT_EQ(read_manifest(path).error, "died: \xEF\xBF\xBD\xEF\xBF\xBD");
}

std::string read_error(const std::string& path) {
  try {
    read_manifest(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Manifest, MissingFileErrorNamesThePath) {
  std::string path = temp_path("missing");
  std::remove(path.c_str());
  EXPECT_EQ(read_error(path), path + ": the manifest: cannot open: No such file or directory");
}

TEST(Manifest, BadJsonErrorNamesThePath) {
  std::string path = temp_path("bad");
  std::ofstream(path) << "{\"scenario\": \"x\",";
  EXPECT_EQ(read_error(path), path + ": not a JSON object");
  std::ofstream(path) << "[1, 2]";
  EXPECT_EQ(read_error(path), path + ": not a JSON object");
}

TEST(Manifest, BadFieldErrorNamesThePathAndField) {
  std::string path = temp_path("field");
  std::ofstream(path) << R"({"scenario": "x", "faults": [{"kind": "lr_zero"}, {"kind": "x", "active_from": "soon"}]})";
  EXPECT_EQ(read_error(path), path + ": bad manifest field 'faults[1].active_from': got \"soon\"");
  std::ofstream(path) << R"({"faults": []})";
  EXPECT_EQ(read_error(path), path + ": bad manifest field 'scenario': missing");
  std::ofstream(path) << R"({"scenario": 3})";
  EXPECT_EQ(read_error(path), path + ": bad manifest field 'scenario': expected a string, got 3");
  std::ofstream(path) << R"({"scenario": "x", "expect": {"cause": "lr_zero", "within_steps": "five"}})";
  EXPECT_EQ(read_error(path), path + ": bad manifest field 'expect.within_steps': got \"five\"");
  std::ofstream(path) << R"({"scenario": "x", "faults": {"kind": "lr_zero"}})";
  EXPECT_EQ(read_error(path), path + ": bad manifest field 'faults': got {\"kind\":\"lr_zero\"}");
  std::ofstream(path) << R"({"scenario": "x", "faults": [{"mode": "m"}]})";
  EXPECT_EQ(read_error(path), path + ": bad manifest field 'faults[0].kind': missing");
}

TEST(Manifest, NullFieldsReadAsDefaults) {
  // nlohmann writes a non-finite double as null; reading it back must not fail.
  std::string path = temp_path("null");
  Manifest m = example();
  m.wall_s = std::nan("");
  write_manifest(m, path);
  EXPECT_EQ(read_manifest(path).wall_s, 0.0);
}

TEST(Manifest, WriteToAnUnwritablePathThrowsNamingIt) {
  std::string path = ::testing::TempDir() + "no_such_dir_flatline/manifest.json";
  try {
    write_manifest(example(), path);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot write the manifest (open): No such file or directory");
  }
}

}  // namespace
}  // namespace flatline
