// A rank that dies (SIGKILL, as the OOM killer does) makes the others fail with a clear error in
// bounded time, and every step completed before the death stays on disk.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "telemetry/jsonl.h"
#include "telemetry/manifest.h"

namespace {
namespace fs = std::filesystem;

// The pid of the `flatline worker` process of `rank` whose command line names `run_dir`, or -1.
int find_worker(const std::string& run_dir, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream c(e.path() / "cmdline"), env(e.path() / "environ");
    std::string cmd((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
    std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (cmd.find("worker") == std::string::npos || cmd.find(run_dir) == std::string::npos) continue;
    // environ is NUL-separated; RANK=<r> is one whole entry (not LOCAL_RANK)
    const std::string entry = "RANK=" + std::to_string(rank);
    bool found = false;
    for (size_t at = 0; at < vars.size();) {
      size_t end = vars.find('\0', at);
      if (end == std::string::npos) end = vars.size();
      found = found || vars.compare(at, end - at, entry) == 0;
      at = end + 1;
    }
    if (!found) continue;
    return std::stoi(pid);
  }
  return -1;
}

int64_t steps_on_disk(const std::string& file) {
  int64_t n = 0;
  for (const auto& r : flatline::read_jsonl(file, nullptr)) n += r.kind == flatline::RecordKind::step;
  return n;
}

TEST(RankDeath, KilledRankEndsTheRunWithAClearErrorAndKeepsTelemetry) {
  const std::string d = (fs::temp_directory_path() / ("flatline-kill-" + std::to_string(std::random_device{}() % 1000000))).string();
  fs::create_directories(d);
  std::ofstream(d + "/s.yaml") << R"(name: e2e-kill
seed: 3
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: 2
steps: 100000
batch_size: 8
optimizer: {kind: adamw, lr: 3.0e-3}
schedule: {kind: constant}
heartbeat_s: 0.2
collective_timeout_s: 5
expect: {cause: healthy}
)";
  const std::string run_dir = d + "/runs/e2e-kill";
  FILE* p = popen((std::string(FLATLINE_BIN) + " run " + d + "/s.yaml --out " + d + "/runs 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  int victim = -1;
  for (int i = 0; i < 600 && victim < 0; ++i) {  // up to 60 s for start-up and 20 steps
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (fs::exists(run_dir + "/telemetry/rank-1.jsonl") && steps_on_disk(run_dir + "/telemetry/rank-1.jsonl") >= 20)
      victim = find_worker(run_dir, 1);
  }
  ASSERT_GT(victim, 0) << "rank 1 never reached step 20";
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
  EXPECT_NE(m.error.find("rank 1 exited with status 137"), std::string::npos) << m.error;
  EXPECT_GE(steps_on_disk(run_dir + "/telemetry/rank-1.jsonl"), before);  // nothing lost
  bool rank0_error = false;
  for (const auto& r : flatline::read_jsonl(run_dir + "/telemetry/rank-0.jsonl", nullptr))
    if (r.kind == flatline::RecordKind::event && r.name == "error") {
      rank0_error = true;
      EXPECT_NE(r.detail.find("failed (a peer died"), std::string::npos) << r.detail;
    }
  EXPECT_TRUE(rank0_error) << out;
}

}  // namespace
