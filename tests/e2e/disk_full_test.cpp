// A full disk under a run (a small tmpfs as --out, filled while the ranks train): the ranks leave with
// the OS's reason, the file and the step (telemetry) or the checkpoint file, the launcher's error line
// quotes them although the logs are on the same full disk, and the manifest is never replaced by an
// empty file (atomic writes, checked). Needs root to mount a tmpfs (CI runs as root); skipped with the
// reason otherwise.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "telemetry/manifest.h"
#include "tests/e2e/helpers.h"
#include "tests/e2e/small_disk.h"

namespace {
using namespace flatline::e2e;

TEST(DiskFull, TelemetryOnAFullDiskEndsTheRanksWithTheReasonTheFileAndTheStep) {
  const std::string d = scratch();
  SmallDisk disk(d + "/runs", "4m");
  if (!disk.why_not().empty()) GTEST_SKIP() << disk.why_not();
  write(d, "s.yaml", "name: e2e-full\n" + std::string(kTinyBase) +
                         "steps: 100000\nschedule: {kind: constant}\ncollective_timeout_s: 5\nexpect: {cause: healthy}\n");
  const std::string run_dir = d + "/runs/e2e-full";
  Background run({"run", d + "/s.yaml", "--out", d + "/runs"}, d + "/out.txt");
  ASSERT_TRUE(wait_for_steps(run_dir, 0, 20)) << run.output();
  disk.fill(0);
  EXPECT_EQ(run.wait(60), 1) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("run ended with an error: rank "), std::string::npos) << out;
  EXPECT_NE(out.find(".jsonl: cannot write the "), std::string::npos) << out;
  EXPECT_NE(out.find("record of step "), std::string::npos) << out;
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  // the final manifest could not be written: said so, and the one written at the start is intact
  EXPECT_NE(out.find("error: " + run_dir + "/manifest.json: cannot write the manifest"), std::string::npos) << out;
  const flatline::Manifest m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.scenario, "e2e-full");
  disk.unfill();
  expect_no_process_left(run_dir);
}

TEST(DiskFull, ACheckpointOnAFullDiskIsAClearErrorNotAnAbort) {
  const std::string d = scratch();
  SmallDisk disk(d + "/runs", "8m");
  if (!disk.why_not().empty()) GTEST_SKIP() << disk.why_not();
  // 2x64 GPT: ~1.4 MB per rank's checkpoint (parameters and AdamW's two moments); 300 steps of
  // telemetry take ~0.4 MB
  write(d, "s.yaml", R"(name: e2e-full-checkpoint
seed: 3
model: {kind: gpt, n_layer: 2, n_head: 4, n_embd: 64, block_size: 64}
world_size: 2
steps: 400
batch_size: 4
schedule: {kind: constant}
heartbeat_s: 0.2
collective_timeout_s: 5
checkpoint: {every: 300}
expect: {cause: healthy}
)");
  const std::string run_dir = d + "/runs/e2e-full-checkpoint";
  Background run({"run", d + "/s.yaml", "--out", d + "/runs"}, d + "/out.txt");
  ASSERT_TRUE(wait_for_steps(run_dir, 0, 10)) << run.output();
  ASSERT_LT(steps_on_disk(run_dir + "/telemetry/rank-0.jsonl"), 250) << "too fast to fill the disk in time";
  disk.fill(900 << 10);
  EXPECT_EQ(run.wait(120), 1) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("/checkpoints/step-00000300/rank-"), std::string::npos) << out;
  EXPECT_NE(out.find(".pt: cannot write the checkpoint (write): No space left on device"), std::string::npos) << out;
  EXPECT_EQ(out.find("status 134"), std::string::npos) << out;          // no abort
  EXPECT_EQ(out.find("Exception raised from"), std::string::npos) << out;  // no C++ backtrace
  const flatline::Manifest m = flatline::read_manifest(run_dir + "/manifest.json");
  EXPECT_EQ(m.status, "failed");
  EXPECT_NE(m.error.find("No space left on device"), std::string::npos) << m.error;
  EXPECT_EQ(steps_on_disk(run_dir + "/telemetry/rank-0.jsonl"), 300);  // every completed step is on disk
  disk.unfill();
  expect_no_process_left(run_dir);
}

}  // namespace
