// A rank that dies (SIGKILL, as the OOM killer does) makes the others fail with a clear error in
// bounded time, every step completed before the death stays on disk, the launcher says how the rank
// ended (a `stopped` event), and the run is the harness's failure, never the detector's false alarm.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "telemetry/jsonl.h"
#include "telemetry/manifest.h"
#include "tests/e2e/helpers.h"

namespace {
using namespace flatline::e2e;

const std::string kLongHealthy = std::string(kTinyBase) + R"(steps: 100000
schedule: {kind: constant}
collective_timeout_s: 5
expect: {cause: healthy}
)";

TEST(RankDeath, KilledRankEndsTheRunWithAClearErrorAndKeepsTelemetry) {
  const std::string d = scratch();
  write(d, "s.yaml", "name: e2e-kill\n" + kLongHealthy);
  const std::string run_dir = d + "/runs/e2e-kill";
  FILE* p = popen((std::string(FLATLINE_BIN) + " run " + d + "/s.yaml --out " + d + "/runs 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(wait_for_steps(run_dir, 1, 20)) << "rank 1 never reached step 20";
  const int victim = find_worker(run_dir, 1);
  ASSERT_GT(victim, 0);
  const int64_t before = steps_on_disk(run_dir + "/telemetry/rank-1.jsonl");
  const auto killed_at = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  const double after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_LT(after_kill, 5 + 20 + 5) << out;  // collective timeout + launcher grace + slack
  auto m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "failed");
  EXPECT_NE(m.error.find("rank 1 exited with status 137 (killed by SIGKILL)"), std::string::npos) << m.error;
  EXPECT_GE(steps_on_disk(run_dir + "/telemetry/rank-1.jsonl"), before);  // nothing lost
  bool rank0_error = false;
  for (const auto& r : flatline::read_jsonl(run_dir + "/telemetry/rank-0.jsonl", nullptr))
    if (r.kind == flatline::RecordKind::event && r.name == "error") {
      rank0_error = true;
      EXPECT_NE(r.detail.find("failed (a peer died"), std::string::npos) << r.detail;
    }
  EXPECT_TRUE(rank0_error) << out;
  // rank 1 could not say how it ended: the launcher did
  const flatline::Record last = last_record(run_dir, 1);
  EXPECT_EQ(last.name, "stopped");
  EXPECT_NE(last.detail.find("exited with status 137 (killed by SIGKILL)"), std::string::npos) << last.detail;
  // a healthy run that lost a rank is the harness's failure, not a detector's false alarm
  EXPECT_NE(out.find("verdict: RUN FAILED"), std::string::npos) << out;
  EXPECT_EQ(out.find("FALSE ALARM"), std::string::npos) << out;
  expect_no_process_left(run_dir);
}

// The same death under `flatline score`: the run is a JUnit <error> (the harness failed), not a
// <failure> (the detector), and the scoreboard keeps it out of accuracy and false alarms.
TEST(RankDeath, ScoreReportsAHarnessFailureAsAJunitError) {
  const std::string d = scratch();
  write(d, "s.yaml", "name: e2e-kill-score\n" + kLongHealthy);
  const std::string run_dir = d + "/runs/e2e-kill-score";
  Background score({"score", d + "/s.yaml", "--out", d + "/runs", "--junit", d + "/j.xml", "--json", d + "/s.json"},
                   d + "/out.txt");
  ASSERT_TRUE(wait_for_steps(run_dir, 1, 20)) << score.output();
  kill(find_worker(run_dir, 1), SIGKILL);
  EXPECT_EQ(score.wait(60), 3) << score.output();  // `score`'s status for a harness failure
  const std::string xml = read_file(d + "/j.xml"), out = score.output();
  EXPECT_NE(xml.find("failures=\"0\" errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"harness error: run failed (expected healthy)"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("false_alarm"), std::string::npos) << xml;
  EXPECT_NE(out.find("-> ERROR: harness error"), std::string::npos) << out;
  EXPECT_NE(out.find("false alarms per healthy run: 0.00 (0 on 0 healthy runs"), std::string::npos) << out;
  expect_no_process_left(run_dir);
}

}  // namespace
