#include "cli/launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "core/ports.h"
#include "core/protocol.h"
#include "faults/effects.h"
#include "sim/build_info.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

// The poll loop's period: 50 ms for the built-in detectors (a finding is stamped with its record, not
// with when it was seen); 10 ms with external detectors attached, whose alarms are stamped on arrival
// (about two steps of the main suite's 6 ms steps at most; the cost is in bench/README.md).
constexpr int kPollMs = 50, kPollWithDetectorsMs = 10;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

pid_t spawn_rank(const LaunchOptions& o, const Scenario& s, int rank, int port, double t0, bool resume) {
  fs::create_directories(o.run_dir + "/logs");
  const std::string log = fmt::format("{}/logs/rank-{}.log", o.run_dir, rank);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  // child
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  setenv(kEnvRank, std::to_string(rank).c_str(), 1);
  setenv(kEnvLocalRank, std::to_string(rank).c_str(), 1);
  setenv(kEnvWorldSize, std::to_string(s.world_size).c_str(), 1);
  setenv(kEnvLocalWorldSize, std::to_string(s.world_size).c_str(), 1);
  setenv(kEnvMasterAddr, kDefaultMasterAddr, 1);
  setenv(kEnvMasterPort, std::to_string(port).c_str(), 1);
  setenv(kEnvRunT0, fmt::format("{:.6f}", t0).c_str(), 1);
  if (o.threads_per_rank > 0) setenv(kEnvThreads, std::to_string(o.threads_per_rank).c_str(), 1);
  const std::string scen = o.run_dir + "/scenario.yaml";
  std::vector<const char*> argv = {o.self_exe.c_str(), "worker", scen.c_str(), "--run-dir", o.run_dir.c_str()};
  if (resume) argv.push_back("--resume");
  if (!o.device.empty()) argv.insert(argv.end(), {"--device", o.device.c_str()});
  if (!o.process_group.empty()) argv.insert(argv.end(), {"--process-group", o.process_group.c_str()});
  std::string formats;
  for (const auto& f : o.formats) formats += (formats.empty() ? "" : ",") + f;
  if (!formats.empty()) {
    argv.push_back("--formats");
    argv.push_back(formats.c_str());
  }
  argv.push_back(nullptr);
  execv(o.self_exe.c_str(), const_cast<char* const*>(argv.data()));
  std::fprintf(stderr, "exec %s failed: %s\n", o.self_exe.c_str(), std::strerror(errno));
  _exit(kExitExecFailed);
}

std::string last_lines(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += lines[i] + "\n";
  return out;
}

// Feeds every new record of every rank into the triage and the onset clock (each rank's order preserved).
struct LiveFeed {
  std::vector<std::unique_ptr<JsonlTail>> tails;
  std::vector<std::string> warnings;
  OnsetClock onsets;
  double last_t = 0;
  DetectorFeed* detectors = nullptr;  // external detectors, when attached
  explicit LiveFeed(std::vector<FaultTruth> truths) : onsets(std::move(truths)) {}
  void poll(Triage& tri) {
    for (auto& t : tails) {
      std::vector<Record> batch;
      t->poll(batch, &warnings);
      for (const auto& r : batch) {
        tri.observe(r);
        if (detectors) detectors->push(r);
        onsets.observe(r);
        if (std::isfinite(r.t)) last_t = std::max(last_t, r.t);
      }
    }
  }
};

// Runs one phase (start or resume) of all ranks; returns the exit codes, first error.
std::vector<int> run_phase(const Scenario& s, const LaunchOptions& o, double t0, bool resume, Triage& tri,
                           LiveFeed& feed, std::string& first_error) {
  const int port = free_tcp_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < s.world_size; ++r) pids.push_back(spawn_rank(o, s, r, port, t0, resume));
  std::vector<int> codes(pids.size(), -1);
  size_t alive = pids.size();
  double kill_at = -1;
  // A rank's failure reaches the others within the collective timeout; past that (plus start-up and
  // checkpoint slack) whoever is left is stuck, so it is killed.
  const double grace = s.collective_timeout_s + kKillGraceS;
  while (alive > 0) {
    if (feed.detectors) feed.detectors->pump(wall_now() - t0, kPollWithDetectorsMs);
    else std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    feed.poll(tri);
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
      codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      --alive;
      if (codes[i] != kExitOk && codes[i] != kExitRestart) {
        if (first_error.empty())
          first_error = fmt::format("rank {} exited with status {}: {}", i, codes[i],
                                    last_lines(fmt::format("{}/logs/rank-{}.log", o.run_dir, i), 3));
        if (kill_at < 0) kill_at = wall_now() + grace;
      }
    }
    if (kill_at > 0 && alive > 0 && wall_now() > kill_at) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (codes[i] == -1) kill(pids[i], SIGKILL);
      kill_at = wall_now() + 3600;  // reaped on the next turns
    }
  }
  feed.poll(tri);
  return codes;
}

}  // namespace

LaunchResult launch_run(const Scenario& s, const std::string& yaml_text, const LaunchOptions& o) {
  LaunchResult res;
  const double start = wall_now();
  // A new run replaces an old one, but never a directory that is not a flatline run directory.
  if (fs::exists(o.run_dir) && !fs::is_empty(o.run_dir) && !fs::exists(o.run_dir + "/manifest.json"))
    throw std::runtime_error(o.run_dir + ": exists and is not a flatline run directory (no manifest.json); "
                                         "refusing to replace it: choose another --out or scenario name");
  std::error_code ec;
  fs::remove_all(o.run_dir, ec);
  fs::create_directories(o.run_dir + "/telemetry");
  std::ofstream(o.run_dir + "/scenario.yaml") << yaml_text;

  Manifest& m = res.manifest;
  m = scenario_manifest(s, fmt::format("flatline {}; {}; {}", FLATLINE_VERSION, build_info(), placement_info(s)));
  write_manifest(m, o.run_dir + "/manifest.json");

  DetectorConfig cfg;
  cfg.world_size = s.world_size;
  Triage tri(cfg);
  if (o.live_print)
    tri.on_finding([](const Finding& f) {
      std::cout << fmt::format("  [live] step {} (t={:.1f}s): {}{} — {}\n", f.detected_step, f.detected_t, f.cause,
                               f.rank >= 0 ? fmt::format(" (rank {})", f.rank) : "",
                               f.evidence.empty() ? "" : f.evidence.front())
                << std::flush;
    });
  LiveFeed feed(RunPlan(s).truths());
  std::unique_ptr<DetectorFeed> detectors;
  if (!o.detectors.empty()) {
    FeedOptions fo;
    fo.mode = FeedMode::live;
    fo.run_dir = o.run_dir;
    fo.world_size = s.world_size;
    fo.limits = o.detector_limits;
    fo.env = o.detector_env;
    fo.stderr_dir = o.run_dir + "/detectors";
    fs::create_directories(fo.stderr_dir);
    detectors = std::make_unique<DetectorFeed>(o.detectors, fo);
    feed.detectors = detectors.get();
  }
  for (int r = 0; r < s.world_size; ++r)
    feed.tails.push_back(std::make_unique<JsonlTail>(fmt::format("{}/telemetry/rank-{}.jsonl", o.run_dir, r)));

  auto codes = run_phase(s, o, start, false, tri, feed, res.first_error);
  const bool restart = std::all_of(codes.begin(), codes.end(), [](int c) { return c == kExitRestart; });
  if (restart) codes = run_phase(s, o, start, true, tri, feed, res.first_error);
  tri.finish(feed.last_t);
  res.diagnosis = tri.diagnosis();
  if (detectors) res.detector_outcomes = detectors->finish(wall_now() - start);

  for (size_t i = 0; i < m.faults.size(); ++i) m.faults[i].onset_t = feed.onsets.onset_t(i);
  m.status = res.first_error.empty() ? "completed" : "failed";
  m.error = res.first_error;
  m.wall_s = wall_now() - start;
  write_manifest(m, o.run_dir + "/manifest.json");
  std::ofstream(o.run_dir + "/diagnosis.json") << to_json(res.diagnosis) << "\n";
  if (!feed.warnings.empty()) {
    std::ofstream w(o.run_dir + "/telemetry_warnings.txt");
    for (const auto& x : feed.warnings) w << x << "\n";
  }
  return res;
}

}  // namespace flatline
