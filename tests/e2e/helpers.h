// What the end-to-end tests share: running the flatline binary as a user does (popen, or a child whose
// pid the test holds, to signal it), scratch directories, finding a run's worker processes in /proc,
// and the check every such test ends with: no process of the run is left behind.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/jsonl.h"
#include "tests/e2e/no_process_left.h"

namespace flatline::e2e {
namespace fs = std::filesystem;

struct Ran {
  int status;       // exit status; 128 + N when killed by signal N
  std::string out;  // stdout and stderr
  double seconds;
};

inline int status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

inline Ran run(const std::string& args, const std::string& env = "") {
  const auto t0 = std::chrono::steady_clock::now();
  std::string cmd = env + (env.empty() ? "" : " ") + std::string(FLATLINE_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int st = pclose(p);
  return {status_of(st), out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// A flatline command running in the background, its output going to a file; signal it, then wait().
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::string& out_file) : out_file_(out_file) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(out_file.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      std::vector<const char*> argv = {FLATLINE_BIN};
      for (const auto& a : args) argv.push_back(a.c_str());
      argv.push_back(nullptr);
      execv(FLATLINE_BIN, const_cast<char* const*>(argv.data()));
      _exit(127);
    }
    t0_ = std::chrono::steady_clock::now();
  }
  ~Background() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // Waits up to `limit_s`; the exit status (128 + N for signal N), or -1 if it is still running.
  int wait(double limit_s = 120) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        ended_ = std::chrono::steady_clock::now();
        return status_of(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  double seconds_since_start() const {
    return std::chrono::duration<double>((reaped_ ? ended_ : std::chrono::steady_clock::now()) - t0_).count();
  }
  std::string output() const {
    std::ifstream in(out_file_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  std::string out_file_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point t0_, ended_;
};

inline std::string scratch() {
  static std::mt19937_64 rng(std::random_device{}());
  auto d = fs::temp_directory_path() / ("flatline-e2e-" + std::to_string(rng() % 100000000));
  fs::create_directories(d);
  return d.string();
}

inline std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A short GPT on 2 ranks, fast steps and fast heartbeats: prepend `name:` and append the rest.
constexpr const char* kTinyBase = R"(seed: 3
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: 2
batch_size: 8
optimizer: {kind: adamw, lr: 3.0e-3}
heartbeat_s: 0.2
)";

// Pids of processes whose command line mentions `needle` (a run directory), this test excepted.
inline std::vector<int> processes_with(const std::string& needle) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || std::stoi(pid) == getpid()) continue;
    std::string cmd;
    try {  // a process that exits while it is read: libstdc++ throws the read's ESRCH
      std::ifstream c(e.path() / "cmdline");
      cmd.assign((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
    } catch (const std::exception&) {
      continue;
    }
    if (cmd.find(needle) != std::string::npos) out.push_back(std::stoi(pid));
  }
  return out;
}

// The pid of the `flatline worker` process of `rank` whose command line names `run_dir`, or -1.
inline int find_worker(const std::string& run_dir, int rank) {
  for (int pid : processes_with(run_dir)) {
    const std::string dir = "/proc/" + std::to_string(pid);
    std::ifstream c(dir + "/cmdline"), env(dir + "/environ");
    std::string cmd((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
    std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (cmd.find("worker") == std::string::npos) continue;
    // environ is NUL-separated; RANK=<r> is one whole entry (not LOCAL_RANK)
    const std::string entry = "RANK=" + std::to_string(rank);
    for (size_t at = 0; at < vars.size();) {
      size_t end = vars.find('\0', at);
      if (end == std::string::npos) end = vars.size();
      if (vars.compare(at, end - at, entry) == 0) return pid;
      at = end + 1;
    }
  }
  return -1;
}

inline int64_t records_on_disk(const std::string& file, RecordKind kind) {
  int64_t n = 0;
  if (!fs::exists(file)) return 0;
  for (const auto& r : read_jsonl(file, nullptr)) n += r.kind == kind;
  return n;
}
inline int64_t steps_on_disk(const std::string& file) { return records_on_disk(file, RecordKind::step); }

// Waits until rank `rank` of the run has `n` records of `kind` on disk (false after `limit_s`).
inline bool wait_for_records(const std::string& run_dir, int rank, RecordKind kind, int64_t n, double limit_s = 60) {
  const std::string file = run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl";
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < until) {
    if (records_on_disk(file, kind) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}
inline bool wait_for_steps(const std::string& run_dir, int rank, int64_t steps, double limit_s = 60) {
  return wait_for_records(run_dir, rank, RecordKind::step, steps, limit_s);
}

// The check every test that starts ranks ends with: nothing of the run is left (a few seconds allowed
// for processes that are exiting).
inline void expect_no_process_left(const std::string& needle, double limit_s = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  std::vector<int> left = processes_with(needle);
  while (!left.empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = processes_with(needle);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) of " << needle << " left behind, e.g. pid " << left[0];
  for (int pid : left) kill(pid, SIGKILL);  // do not leak them into the next test
}

// The last record of each rank's telemetry file.
inline Record last_record(const std::string& run_dir, int rank) {
  auto recs = read_jsonl(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr);
  return recs.empty() ? Record{} : recs.back();
}

}  // namespace flatline::e2e
