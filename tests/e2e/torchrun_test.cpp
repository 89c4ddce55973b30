// torchrun (the wheel's, from the project's .venv) launches `flatline worker` as its processes:
// `torchrun --standalone --nproc-per-node 2 --no-python flatline worker ...`. The ranks join the
// agent's store (TORCHELASTIC_USE_AGENT_STORE), train, and their telemetry diagnoses as a run.
#include <gtest/gtest.h>

#include <netdb.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "telemetry/jsonl.h"

namespace {
namespace fs = std::filesystem;

struct Ran {
  int status;
  std::string out;
};

Ran sh(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WEXITSTATUS(st), out};
}

// torchrun's agent serves its store on "localhost" (--standalone) and hands the workers this host's
// name as MASTER_ADDR: both must resolve, as they do on any installed machine (/etc/hosts). A bare
// root file system without /etc/hosts cannot run the test; it is skipped with that reason.
std::string unresolvable_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  for (const std::string name : {std::string("localhost"), std::string(host)}) {
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(name.c_str(), nullptr, nullptr, &res);
    if (res) freeaddrinfo(res);
    if (rc != 0) return name + " (" + gai_strerror(rc) + ")";
  }
  return "";
}

TEST(Torchrun, LaunchesTwoWorkersThatTrainAndDiagnose) {
  if (const std::string bad = unresolvable_name(); !bad.empty())
    GTEST_SKIP() << "torchrun needs localhost and this host's name to resolve; here " << bad
                 << " does not (no /etc/hosts?)";
  const char* py = std::getenv("FLATLINE_PYTHON");
  ASSERT_TRUE(py && *py) << "FLATLINE_PYTHON is not set (ctest sets it to the project's .venv/bin/python)";
  const std::string torchrun = (fs::path(py).parent_path() / "torchrun").string();
  ASSERT_TRUE(fs::exists(torchrun)) << torchrun << ": missing (scripts/setup.sh installs torch into .venv/)";
  const fs::path d = fs::temp_directory_path() / ("flatline-torchrun-" + std::to_string(std::random_device{}() % 1000000));
  fs::create_directories(d);
  std::ofstream(d / "s.yaml") << R"(name: torchrun-lr-zero
seed: 3
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: 2
steps: 40
batch_size: 8
optimizer: {kind: adamw, lr: 3.0e-3}
schedule: {kind: cosine, warmup: 5, total: 40, min_lr: 3.0e-4}
heartbeat_s: 0.2
collective_timeout_s: 20
faults:
  - {kind: lr_zero, at: 25, target: {rank: all}, params: {mode: schedule_total_too_short}}
expect: {cause: lr_zero, within_steps: 3}
)";
  const std::string run_dir = (d / "run").string();
  Ran t = sh("OMP_NUM_THREADS=1 " + torchrun + " --standalone --nproc-per-node 2 --no-python " FLATLINE_BIN
             " worker " + (d / "s.yaml").string() + " --run-dir " + run_dir);
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("rank 1: finished at step 40, 40 optimizer steps, 0 parameter mismatches"), std::string::npos)
      << t.out;
  for (int rank = 0; rank < 2; ++rank) {
    int steps = 0;
    for (const auto& r : flatline::read_jsonl(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
      steps += r.kind == flatline::RecordKind::step;
    EXPECT_EQ(steps, 40) << "rank " << rank;
  }
  Ran diag = sh(std::string(FLATLINE_BIN) + " diagnose " + run_dir);
  EXPECT_NE(diag.out.find("lr_zero"), std::string::npos) << diag.out;
  fs::remove_all(d);
}

}  // namespace
