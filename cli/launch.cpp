// The local launcher (launch.h): one phase of ranks at a time (the start, then a resume when the
// scenario restarts), each watched by one poll loop that drains the ranks' output, tails their
// telemetry into the triage, reaps them, and applies the protocol's bounds (core/protocol.h).
#include "cli/launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/local_guard.h"
#include "cli/progress.h"
#include "cli/run_dir.h"
#include "core/atomic_file.h"
#include "core/interrupt.h"
#include "core/ports.h"
#include "core/protocol.h"
#include "core/supervisor.h"
#include "external/feed.h"
#include "faults/effects.h"
#include "faults/intervention.h"
#include "faults/plan_json.h"
#include "sim/build_info.h"
#include "telemetry/jsonl.h"

namespace flatline {

namespace {
// The newest step the run's telemetry files hold on disk now: the largest "step" of the last 64 KiB of
// each rank's file. A rank writes a record's JSONL line before its foreign-format logs get it
// (telemetry/async_writer.h), so nothing a file watcher can read is newer (docs/DETECTORS.md, "Stamps").
int64_t newest_step_on_disk(const std::string& run_dir, int world) {
  int64_t newest = -1;
  std::string buf(64 << 10, '\0');
  for (int r = 0; r < world; ++r) {
    const int fd = ::open(fmt::format("{}/telemetry/rank-{}.jsonl", run_dir, r).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const off_t end = ::lseek(fd, 0, SEEK_END);
    const off_t from = std::max<off_t>(0, end - static_cast<off_t>(buf.size()));
    const ssize_t n = end > 0 ? ::pread(fd, buf.data(), static_cast<size_t>(end - from), from) : 0;
    ::close(fd);
    const std::string_view text(buf.data(), n > 0 ? static_cast<size_t>(n) : 0);
    for (size_t at = text.find("\"step\""); at != std::string_view::npos; at = text.find("\"step\"", at + 6)) {
      size_t i = at + 6;
      while (i < text.size() && text[i] == ' ') ++i;
      if (i >= text.size() || text[i] != ':') continue;  // "kind": "step", not the key
      ++i;
      while (i < text.size() && text[i] == ' ') ++i;
      int64_t v = 0;
      bool digits = false;
      for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) v = v * 10 + (text[i] - '0'), digits = true;
      if (digits && i < text.size()) newest = std::max(newest, v);  // a number cut at the end is not read
    }
  }
  return newest;
}
}  // namespace
namespace fs = std::filesystem;

namespace {

// The poll loop's period (output drained, telemetry tailed, ranks reaped): 50 ms for the built-in
// detectors (a finding is stamped with its record, not with when it was seen); 10 ms with external
// detectors attached, whose alarms are stamped on arrival (about two steps of the main suite's 6 ms
// steps at most; the cost is in bench/README.md).
constexpr int kPollMs = 50, kPollWithDetectorsMs = 10;
constexpr size_t kTailBytes = 8192;     // of each rank's output kept in memory for the error line

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- signals to the launcher ------------------------------------------------------------------------
volatile sig_atomic_t g_signal = 0, g_signals = 0;
void on_launcher_signal(int sig) {
  if (!g_signal) g_signal = sig;
  g_signals = g_signals + 1;
}

// ---- the ranks' processes (core/supervisor.h) ------------------------------------------------------
struct RankProc {
  Child proc;               // its stdout and stderr: one pipe
  OutputKeeper output;      // to logs/rank-<r>.log, and its last kTailBytes in memory
  bool log_warned = false;
  std::string killed_why;   // set when the launcher killed it: why (for its `stopped` event)
  int code() const { return proc.status(); }  // exit status once reaped; 128 + N when killed by signal N
};

// kExitRestart is flatline's own worker's word for "stopped at the scenario's restart"; from an external
// trainer it is that word only where the scenario has a restart and the rank's stream ended with the
// probe's stop_for_restart (docs/DESIGN.md §16): otherwise exit status 3 is a failure like any other.
bool is_restart_exit(const Scenario& s, int code, bool stopped_for_restart) {
  if (code != kExitRestart) return false;
  return s.trainer.command.empty() || (s.restart_at > 0 && stopped_for_restart);
}

// The command line of a rank: its --rank-wrapper's words, then the worker (or the external trainer's shell).
std::vector<std::string> rank_argv(const LaunchOptions& o, const Scenario& s, int rank, LaunchOptions::Start start) {
  std::vector<std::string> words;
  for (size_t at = 0; at < o.rank_wrapper.size();) {
    const size_t b = o.rank_wrapper.find_first_not_of(' ', at);
    if (b == std::string::npos) break;
    const size_t e = std::min(o.rank_wrapper.find(' ', b), o.rank_wrapper.size());
    std::string w = o.rank_wrapper.substr(b, e - b);
    for (size_t k; (k = w.find("{rank}")) != std::string::npos;) w.replace(k, 6, std::to_string(rank));
    words.push_back(std::move(w));
    at = e;
  }
  if (!s.trainer.command.empty()) {
    words.insert(words.end(), {"/bin/sh", "-c", shell_script(s.trainer.command)});
    return words;
  }
  const std::string scen = o.run_dir + "/scenario.yaml";
  words.insert(words.end(), {o.self_exe, "worker", scen, "--run-dir", o.run_dir});
  if (start == LaunchOptions::Start::resume) words.push_back("--resume");
  if (start == LaunchOptions::Start::carry_on) words.push_back("--carry-on");
  words.insert(words.end(), o.worker_args.begin(), o.worker_args.end());
  if (!o.device.empty()) words.insert(words.end(), {"--device", o.device});
  if (!o.process_group.empty()) words.insert(words.end(), {"--process-group", o.process_group});
  std::string formats;
  for (const auto& f : o.formats) formats += (formats.empty() ? "" : ",") + f;
  if (!formats.empty()) words.insert(words.end(), {"--formats", formats});
  return words;
}

RankProc spawn_rank(const LaunchOptions& o, const Scenario& s, int rank, int port, double t0, LaunchOptions::Start start) {
  const std::string log = fmt::format("{}/logs/rank-{}.log", o.run_dir, rank);
  OutputKeeper output;
  output.tail_limit = kTailBytes;
  output.file = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (output.file < 0) throw std::runtime_error(fmt::format("{}: cannot open: {}", log, std::strerror(errno)));
  std::vector<std::pair<std::string, std::string>> vars = {
      {kEnvRank, std::to_string(rank)},          {kEnvLocalRank, std::to_string(rank)},
      {kEnvWorldSize, std::to_string(s.world_size)}, {kEnvLocalWorldSize, std::to_string(s.world_size)},
      {kEnvMasterAddr, o.master_addr.empty() ? kDefaultMasterAddr : o.master_addr},
      {kEnvMasterPort, std::to_string(port)},
      {kEnvRunT0, fmt::format("{:.6f}", t0)}};
  if (o.threads_per_rank > 0) vars.emplace_back(kEnvThreads, std::to_string(o.threads_per_rank));
  const bool external = !s.trainer.command.empty();
  if (external) {  // the probe's variables (docs/DESIGN.md §16); torch's intra-op threads as torchrun sets them
    const std::string dir = fs::absolute(o.run_dir).string();
    vars.insert(vars.end(), {{kEnvProbeRunDir, dir}, {kEnvProbePlan, dir + "/plan.json"},
                             {kEnvProbeResume, start == LaunchOptions::Start::fresh ? "0" : "1"},
                             {kEnvTrainerDir, dir + "/" + kTrainerDirName}});
    if (!std::getenv("OMP_NUM_THREADS"))
      vars.emplace_back("OMP_NUM_THREADS",
                        std::to_string(o.threads_per_rank > 0 ? o.threads_per_rank : std::max(1, this_machine().cores / s.world_size)));
  }
  ChildSpec spec;
  spec.argv = rank_argv(o, s, rank, start);
  spec.env = child_environment(vars);
  spec.cwd = external ? s.trainer.cwd : "";
  spec.what = fmt::format("rank {}", rank);
  spec.exec_failure = "flatline launcher: exec of the worker (or its --rank-wrapper, or the trainer's shell) failed";
  // a checkpoint request before the worker counts them is dropped, not its end (core/checkpoint_request.h)
  if (!external) spec.ignored_signals = {kCheckpointRequestSignal};
  return RankProc{Child(spec), std::move(output), false, ""};
}

// Moves what the rank printed to its log and to the tail in memory. A log that cannot be written (a
// full disk) is reported once; the tail still has the rank's last words.
void drain_output(RankProc& p, int rank, std::vector<std::string>& warnings) {
  Child::drain(p.proc.out(), p.output);
  if (!p.output.file_error.empty() && !p.log_warned) {
    warnings.push_back(fmt::format("logs/rank-{}.log: cannot write the rank's output: {}", rank, p.output.file_error));
    p.log_warned = true;
  }
}

// The last `n` non-empty lines of a rank's output, one line.
std::string last_words(const std::string& tail, int n) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < tail.size()) {
    size_t nl = tail.find('\n', at);
    if (nl == std::string::npos) nl = tail.size();
    std::string l = tail.substr(at, nl - at);
    if (l.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(l);
    at = nl + 1;
  }
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines[i];
  return out.empty() ? "(no output)" : out;
}

std::string status_text(int code) {
  if (code > kExitSignalBase && code < kExitSignalBase + 64)
    return fmt::format("status {} (killed by {})", code, signal_name(code - kExitSignalBase));
  return fmt::format("status {}", code);
}

// Appends one event to a rank's telemetry file: the launcher writes there only once the rank is gone.
// A rank killed in the middle of a line left it without its newline: the event starts a line of its own.
void append_event(const std::string& file, const Record& r) {
  bool newline_first = false;
  {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (in && in.tellg() > 0) {
      in.seekg(-1, std::ios::end);
      newline_first = in.get() != '\n';
    }
  }
  std::FILE* f = std::fopen(file.c_str(), "ab");
  if (!f) throw IoError(fmt::format("{}: cannot open: {}", file, std::strerror(errno)));
  const std::string line = (newline_first ? "\n" : "") + to_json(r) + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fflush(f) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) throw IoError(fmt::format("{}: cannot append the launcher's `{}` event: {}", file, r.name, std::strerror(err)));
}

// Feeds every new record of every rank into the triage, the onset clock and the progress line (each
// rank's order preserved), and remembers how each rank's stream stands.
struct LiveFeed {
  std::vector<std::unique_ptr<JsonlTail>> tails;
  std::vector<std::string> warnings;
  OnsetClock onsets;
  std::vector<char> ended;          // the rank's last record ends its stream (run_end, error, ...)
  std::vector<char> finished;       // ... and that end is its work done (run_end)
  std::vector<char> restarting;     // ... and that end is stop_for_restart
  std::vector<int64_t> last_step;   // the step of its last record
  std::vector<char> stepped;        // the rank wrote a step record (in any phase)
  // Progress (core/protocol.h progress_bound_s): when a step record last arrived from any rank in this
  // phase, and the spacings of the last ones, on the launcher's clock.
  double last_step_wall = 0;
  bool any_step = false;
  std::deque<double> step_spacing;
  double longest_recent_step() const {
    double m = 0;
    for (double x : step_spacing) m = std::max(m, x);
    return m;
  }
  DetectorFeed* detectors = nullptr;  // external detectors, when attached
  LiveFeed(std::vector<FaultTruth> truths, int world)
      : onsets(std::move(truths)), ended(static_cast<size_t>(world), 0), finished(static_cast<size_t>(world), 0),
        restarting(static_cast<size_t>(world), 0), last_step(static_cast<size_t>(world), 0),
        stepped(static_cast<size_t>(world), 0) {}
  size_t poll(Triage& tri, Progress* progress, double now_wall) {
    size_t n = 0;
    for (size_t i = 0; i < tails.size(); ++i) {
      std::vector<Record> batch;
      n += tails[i]->poll(batch, &warnings);
      for (const auto& r : batch) {
        tri.observe(r);
        if (detectors) detectors->push(r);
        onsets.observe(r);
        if (progress) progress->observe(r, now_wall);
        const bool was_ended = ended[i];
        ended[i] = stream_ended_after(was_ended, r);
        if (ended[i] != was_ended || r.kind == RecordKind::event) {
          finished[i] = ended[i] && r.kind == RecordKind::event && r.name == event::run_end;
          restarting[i] = ended[i] && r.kind == RecordKind::event && r.name == event::stop_for_restart;
        }
        last_step[i] = r.step;
        if (r.kind == RecordKind::step) {
          stepped[i] = 1;
          if (any_step && now_wall > last_step_wall) {
            step_spacing.push_back(now_wall - last_step_wall);
            if (step_spacing.size() > 16) step_spacing.pop_front();
          }
          last_step_wall = std::max(last_step_wall, now_wall);
          any_step = true;
        } else if (r.kind == RecordKind::eval || r.kind == RecordKind::event ||
                   (r.kind == RecordKind::heartbeat && (r.phase == "checkpoint" || r.phase == "eval"))) {
          last_step_wall = std::max(last_step_wall, now_wall);  // a checkpoint or an eval is work, not a stall
        }
      }
    }
    return n;
  }
};

// A checkpoint near each finding (core/protocol.h kCheckpointRequestSignal, docs/DESIGN.md §8): a
// finding whose cause has a repair (faults/intervention.h) asks the ranks for one, at most
// kMaxLiveCheckpoints a run; never a replay's ranks (their checkpoints are given) nor an external
// trainer's (the signal is flatline's worker's word).
struct LiveCheckpoints {
  bool on = false;
  bool wanted = false;  // a finding asked since the poll loop last looked
  int asked = 0;
};

struct PhaseContext {
  const Scenario& s;
  const LaunchOptions& o;
  double t0;                        // the run's origin of t (epoch seconds)
  Triage& tri;
  LiveFeed& feed;
  LaunchResult& res;
  std::vector<std::string>& warnings;
  LiveCheckpoints& live;
};

// A finding asked for a checkpoint: every rank still running is asked for one at its next step
// boundary (the ranks agree on the step among themselves), unless the run is being stopped.
void ask_for_checkpoint(PhaseContext& c, std::vector<RankProc>& ranks, bool stopping) {
  if (c.live.wanted && !stopping && c.res.interrupted_by == 0 && !c.res.stalled) {
    for (auto& p : ranks)
      if (p.proc.running()) p.proc.signal(kCheckpointRequestSignal);
    ++c.live.asked;
  }
  c.live.wanted = false;
}

void say(const LaunchOptions& o, const std::string& line) {
  if (o.progress) o.progress->print_line(line);
  else if (o.live_print) std::cout << line << std::flush;
}

// One phase (the start, or a resume) of every rank, run to its end by one poll loop: drain the ranks'
// output, tail their telemetry into the detectors, reap them, and apply the bounds.
class Phase {
 public:
  Phase(PhaseContext& c, LaunchOptions::Start start) : c_(c), s_(c.s), o_(c.o) {
    const int port = free_tcp_port();
    std::fill(c_.feed.ended.begin(), c_.feed.ended.end(), 0);  // new processes: each must end its own stream
    c_.feed.any_step = false;  // and a first step of their own (kFirstStepAllowanceS)
    c_.feed.step_spacing.clear();
    c_.feed.last_step_wall = last_record_wall_ = wall_now();
    for (int r = 0; r < s_.world_size; ++r) ranks_.push_back(spawn_rank(o_, s_, r, port, c_.t0, start));
    alive_ = ranks_.size();
  }

  // Returns the ranks' exit codes.
  std::vector<int> run() {
    while (alive_ > 0) {
      wait();
      const double now = wall_now();
      for (size_t i = 0; i < ranks_.size(); ++i) drain_output(ranks_[i], static_cast<int>(i), c_.warnings);
      if (c_.feed.poll(c_.tri, o_.progress, now) > 0) {
        last_record_wall_ = now;
        any_record_ = true;
      }
      c_.tri.advance(now - c_.t0);
      if (o_.progress) o_.progress->tick(now);
      ask_for_checkpoint(c_, ranks_, /*stopping=*/kill_at_ >= 0);
      reap(now);
      if (alive_ == 0) break;
      forward_signals(now);
      watch_teardown(now);
      watch_records(now);
      watch_steps(now);
      if (kill_at_ > 0 && now > kill_at_) {
        kill_all(kill_why_);
        kill_at_ = -1;
      }
    }
    for (size_t i = 0; i < ranks_.size(); ++i) {
      drain_output(ranks_[i], static_cast<int>(i), c_.warnings);
      Child::close_fd(ranks_[i].proc.out());
      ranks_[i].output.close_file();
    }
    c_.feed.poll(c_.tri, o_.progress, wall_now());
    write_stopped_events();
    c_.feed.poll(c_.tri, o_.progress, wall_now());
    std::vector<int> codes;
    for (const auto& p : ranks_) codes.push_back(p.code());
    return codes;
  }

 private:
  // Until the ranks write something, or the poll period passes (the external detectors' pump waits on
  // their output instead, at their shorter period).
  void wait() {
    if (c_.feed.detectors) {
      c_.feed.detectors->pump(wall_now() - c_.t0, kPollWithDetectorsMs);
      return;
    }
    std::vector<pollfd> fds;
    for (auto& p : ranks_)
      if (p.proc.out() >= 0) fds.push_back({p.proc.out(), POLLIN, 0});
    if (fds.empty()) usleep(kPollMs * 1000);
    else poll(fds.data(), fds.size(), kPollMs);
  }

  void kill_all(const std::string& why) {
    for (auto& p : ranks_)
      if (p.proc.running() && p.killed_why.empty()) {
        p.proc.kill();
        p.killed_why = why;
      }
  }

  // Collects the ranks that ended. The first failure names the run's error (a failed collective, its last
  // words carrying kCommFailureMark, gives way to another kind of failure) and starts the kill of the rest.
  void reap(double now) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      RankProc& p = ranks_[i];
      if (!p.proc.running() || !p.proc.reap()) continue;
      --alive_;
      drain_output(p, static_cast<int>(i), c_.warnings);
      const bool by_signal_asked = forwarded_ > 0 && p.code() == kExitSignalBase + c_.res.interrupted_by;
      if (c_.feed.poll(c_.tri, o_.progress, now) > 0) {  // its last records: did it stop for the restart?
        last_record_wall_ = now;
        any_record_ = true;
      }
      if (p.code() == kExitOk || is_restart_exit(s_, p.code(), c_.feed.restarting[i]) || by_signal_asked ||
          !p.killed_why.empty())
        continue;
      const std::string words = last_words(p.output.tail, 3);
      if (c_.feed.finished[i]) {
        // Its stream ended with its run_end: it trained every step and its telemetry is complete; what
        // failed is the process's teardown (an interpreter's exit, a process group's destructor), which
        // the run's verdict does not rest on (docs/DESIGN.md §8, teardown): a warning, and the run stands.
        c_.warnings.push_back(fmt::format("rank {} exited with {} after its run_end (in teardown; its telemetry is "
                                          "complete): {}",
                                          i, status_text(p.code()), words));
        continue;
      }
      const bool consequence = words.find(kCommFailureMark) != std::string::npos;
      if (c_.res.first_error.empty() ||
          (!consequence && c_.res.first_error.find(kCommFailureMark) != std::string::npos))
        c_.res.first_error = fmt::format("rank {} exited with {}: {}", i, status_text(p.code()), words);
      if (kill_at_ < 0) {
        // Its peers fail within the collective timeout; past that (plus start-up and checkpoint slack)
        // whoever is left is stuck.
        kill_at_ = now + s_.collective_timeout_s + kKillGraceS;
        kill_why_ = fmt::format("still running {:.0f} s after rank {} failed (collective timeout {:.0f} s + {:.0f} s): "
                                "killed by the launcher",
                                s_.collective_timeout_s + kKillGraceS, i, s_.collective_timeout_s, kKillGraceS);
      }
    }
  }

  // Signals to the launcher: the first is forwarded (with SIGCONT: a stopped rank must run to handle it),
  // a second kills at once.
  void forward_signals(double now) {
    if (g_signals <= forwarded_) return;
    const int sig = g_signal;
    if (forwarded_ == 0) {
      c_.res.interrupted_by = sig;
      c_.res.first_error = fmt::format("interrupted by {} (to the launcher); every rank was asked to stop", signal_name(sig));
      for (auto& p : ranks_) {
        p.proc.signal(sig);
        p.proc.signal(SIGCONT);
      }
      kill_at_ = now + kInterruptGraceS;
      kill_why_ = fmt::format("{} to the launcher: did not exit within {:.0f} s: killed", signal_name(sig), kInterruptGraceS);
      say(o_, fmt::format("  {}: stopping {} rank(s) (killed in {:.0f} s; send it again to kill them now)\n",
                          signal_name(sig), alive_, kInterruptGraceS));
    } else {
      kill_all(fmt::format("{} to the launcher, again: killed at once", signal_name(sig)));
    }
    forwarded_ = g_signals;
  }

  void stall(const std::string& why) {
    c_.res.stalled = true;
    c_.res.first_error = why;
    say(o_, "  [watchdog] " + why + "\n");
    kill_all(why);
  }

  // Teardown (core/protocol.h teardown_grace_s): while every rank still running has written its run_end, its
  // silence is no stall; past the bound the launcher kills them, with a warning, and the run stands.
  void watch_teardown(double now) {
    tearing_down_ = true;
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i].proc.running() && !c_.feed.finished[i]) tearing_down_ = false;
    if (!tearing_down_) {
      teardown_since_ = -1;
      return;
    }
    if (teardown_since_ < 0) teardown_since_ = now;
    const double grace = teardown_grace_s(s_.collective_timeout_s);
    if (torn_down_ || now - teardown_since_ <= grace) return;
    torn_down_ = true;
    const std::string why = fmt::format("wrote its end but had not exited {:.0f} s later (teardown bound max({:.0f} s, "
                                        "collective timeout {:.0f} s)): killed by the launcher; its telemetry is complete",
                                        grace, kTeardownMinS, s_.collective_timeout_s);
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i].proc.running()) c_.warnings.push_back(fmt::format("rank {} {}", i, why));
    say(o_, "  [watchdog] every rank still running " + why + "\n");
    kill_all(why);
  }

  // The progress watchdog (core/protocol.h): no record from any rank for the bound, on the launcher's clock.
  void watch_records(double now) {
    const double stall_bound = stall_bound_s(s_.heartbeat_s, s_.collective_timeout_s);
    const double bound = any_record_ ? stall_bound : kJoinTimeoutS + stall_bound;
    if (tearing_down_ || c_.res.stalled || c_.res.interrupted_by != 0 || now - last_record_wall_ <= bound) return;
    stall(fmt::format("no record from any rank for {:.1f} s (the launcher's clock; bound {:.0f} s = max({:.0f} heartbeats "
                      "of {} s, collective timeout {:.0f} s){}): every rank stopped by the launcher",
                      now - last_record_wall_, bound, kStallHeartbeats, s_.heartbeat_s, s_.collective_timeout_s,
                      any_record_ ? "" : fmt::format(", {:.0f} s more for start-up", kJoinTimeoutS)));
  }

  // ... and on progress: heartbeats arrive, step records do not (every rank blocked reading its data, a
  // deadlocked loader): no collective times out, so nothing else would end it.
  void watch_steps(double now) {
    const LiveFeed& f = c_.feed;
    const double bound = progress_bound_s(f.any_step, f.longest_recent_step(), s_.heartbeat_s, s_.collective_timeout_s);
    const double floor = progress_bound_s(true, 0, s_.heartbeat_s, s_.collective_timeout_s);
    if (tearing_down_ || c_.res.stalled || c_.res.interrupted_by != 0 || kill_at_ >= 0 || now - f.last_step_wall <= bound)
      return;
    stall(f.any_step
              ? fmt::format("no step from any rank for {:.1f} s while records still arrive (the launcher's clock; "
                            "bound {:.0f} s = max({:.0f} x the longest recent step {:.2f} s, {:.0f} s)): every rank "
                            "stopped by the launcher",
                            now - f.last_step_wall, bound, kProgressSteps, f.longest_recent_step(), floor)
              : fmt::format("no first step from any rank for {:.1f} s while records still arrive (the launcher's "
                            "clock; bound {:.0f} s = a first step's allowance {:.0f} s + {:.0f} s): every rank stopped "
                            "by the launcher",
                            now - f.last_step_wall, bound, kFirstStepAllowanceS, floor));
  }

  // A `stopped` event for every rank whose stream did not end with its own last word (docs/DESIGN.md §3).
  void write_stopped_events() {
    const double t_end = wall_now() - c_.t0;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const RankProc& p = ranks_[i];
      if (c_.feed.ended[i]) continue;
      Record r;
      r.kind = RecordKind::event;
      r.rank = static_cast<int>(i);
      r.t = t_end;
      r.step = c_.feed.last_step[i];
      r.name = event::stopped;
      r.detail = !p.killed_why.empty() ? p.killed_why
                                       : fmt::format("exited with {} without writing its end", status_text(p.code()));
      try {
        append_event(fmt::format("{}/telemetry/rank-{}.jsonl", o_.run_dir, i), r);
      } catch (const IoError& e) {
        c_.warnings.push_back(e.what());
      }
    }
  }

  PhaseContext& c_;
  const Scenario& s_;
  const LaunchOptions& o_;
  std::vector<RankProc> ranks_;
  size_t alive_ = 0;
  double kill_at_ = -1;       // wall time at which whoever is left is killed
  std::string kill_why_;
  int forwarded_ = 0;         // signals already forwarded to the ranks
  double last_record_wall_ = 0;
  bool any_record_ = false;
  bool tearing_down_ = false;  // every rank still running has written its run_end
  double teardown_since_ = -1;  // wall time since when
  bool torn_down_ = false;
};

}  // namespace

void install_launcher_signals() {
  static bool done = false;
  if (done) return;
  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  done = true;
}

int launcher_interrupt() { return g_signal; }

LaunchResult launch_run(const Scenario& s, const std::string& yaml_text, const LaunchOptions& o) {
  install_launcher_signals();
  if (s.fleet_only)
    throw ScenarioError(fmt::format("{}: fleet-only scenario (fleet_only: true, world_size {}): it is for the fleet "
                                    "simulator, not local processes: flatline simulate {}",
                                    s.source, s.world_size, s.source));
  if (const std::string why = local_world_refusal(s, this_machine(), o.oversubscribe); !why.empty())
    throw ScenarioError(why);
  LaunchResult res;
  const double start = wall_now();
  // A replay's directory was prepared by its caller (the checkpoint it starts from): locked, not emptied.
  RunDirLock lock = o.replay ? lock_prepared_run_dir(o.run_dir) : claim_run_dir(o.run_dir);
  fs::create_directories(o.run_dir + "/telemetry");
  fs::create_directories(o.run_dir + "/logs");
  write_file_atomic(o.run_dir + "/scenario.yaml", yaml_text, "the scenario");
  if (!s.trainer.command.empty()) {
    write_file_atomic(o.run_dir + "/plan.json", plan_json(s), "the probe's plan");
    fs::create_directories(fs::path(o.run_dir) / kTrainerDirName);  // its own outputs' place (kEnvTrainerDir)
  }

  Manifest& m = res.manifest;
  m = scenario_manifest(s, fmt::format("flatline {}; {}; {}", FLATLINE_VERSION, build_info(), placement_info(s)));
  if (o.replay) m.faults.clear();  // a replay's caller never sees the ground truth
  else write_manifest(m, o.run_dir + "/manifest.json");

  DetectorConfig cfg;
  cfg.world_size = s.world_size;
  Triage tri(cfg);
  LiveCheckpoints live;
  live.on = !o.replay && s.trainer.command.empty();
  tri.on_finding([&o, &live](const Finding& f) {
    if (live.on && live.asked < kMaxLiveCheckpoints && has_intervention(f.cause)) live.wanted = true;
    if (o.live_print)
      say(o, fmt::format("  [live] step {} (t={:.1f}s): {}{} — {}\n", f.detected_step, f.detected_t, f.cause,
                         f.rank >= 0 ? fmt::format(" (rank {})", f.rank) : "",
                         f.evidence.empty() ? "" : f.evidence.front()));
  });
  LiveFeed feed(o.replay ? std::vector<FaultTruth>{} : RunPlan(s).truths(), s.world_size);
  std::unique_ptr<DetectorFeed> detectors;
  if (!o.detectors.empty()) {
    FeedOptions fo;
    fo.mode = FeedMode::live;
    fo.run_dir = o.run_dir;
    fo.world_size = s.world_size;
    fo.limits = o.detector_limits;
    fo.env = o.detector_env;
    fo.stderr_dir = o.run_dir + "/detectors";
    fo.interrupted = [] { return launcher_interrupt(); };  // stopped with the ranks, within the design's 5 s
    fo.newest_step_on_disk = [dir = o.run_dir, world = s.world_size] { return newest_step_on_disk(dir, world); };
    fs::create_directories(fo.stderr_dir);
    detectors = std::make_unique<DetectorFeed>(o.detectors, fo);
    feed.detectors = detectors.get();
  }
  for (int r = 0; r < s.world_size; ++r)
    feed.tails.push_back(std::make_unique<JsonlTail>(fmt::format("{}/telemetry/rank-{}.jsonl", o.run_dir, r)));
  std::vector<std::string> warnings;
  PhaseContext c{s, o, start, tri, feed, res, warnings, live};

  auto codes = Phase(c, o.start).run();
  bool restart = !codes.empty();
  for (size_t i = 0; i < codes.size(); ++i) restart = restart && is_restart_exit(s, codes[i], feed.restarting[i]);
  if (restart && res.interrupted_by == 0) codes = Phase(c, LaunchOptions::Start::resume).run();
  if (o.progress) o.progress->done();
  // An external trainer that exits 0 having trained nothing the probe saw is a failed run, not a healthy
  // one (docs/DESIGN.md §16): its script ran, the probe was not attached or wrote elsewhere.
  if (!s.trainer.command.empty() && res.first_error.empty() && res.interrupted_by == 0)
    for (size_t i = 0; i < codes.size(); ++i)
      if (!feed.stepped[i]) {
        res.first_error = fmt::format(
            "rank {} exited with {} without writing a step record to {}/telemetry/rank-{}.jsonl: the external "
            "trainer '{}' ran no step with flatline's probe attached (it writes to ${})",
            i, status_text(codes[i]), o.run_dir, i, s.trainer.command, kEnvProbeRunDir);
        break;
      }
  // Liveness is judged against the time the run ended, not its last record (a silent rank shows).
  const double t_end = wall_now() - start;
  tri.finish(t_end);
  res.diagnosis = tri.diagnosis();
  if (detectors) res.detector_outcomes = detectors->finish(wall_now() - start);

  for (size_t i = 0; i < m.faults.size(); ++i) m.faults[i].onset_t = feed.onsets.onset_t(i);
  m.status = res.interrupted_by ? "interrupted" : res.first_error.empty() ? "completed" : "failed";
  m.error = res.first_error;
  m.wall_s = wall_now() - start;
  warnings.insert(warnings.end(), feed.warnings.begin(), feed.warnings.end());
  auto attempt = [&](const std::function<void()>& write) {
    try {
      write();
    } catch (const std::exception& e) {
      res.write_errors.push_back(e.what());
    }
  };
  if (!o.replay) attempt([&] { write_manifest(m, o.run_dir + "/manifest.json"); });
  attempt([&] { write_file_atomic(o.run_dir + "/diagnosis.json", to_json(res.diagnosis) + "\n", "the diagnosis"); });
  if (!warnings.empty()) {
    std::string text;
    for (const auto& w : warnings) text += w + "\n";
    attempt([&] { write_file_atomic(o.run_dir + "/telemetry_warnings.txt", text, "the telemetry warnings"); });
  }
  return res;
}

}  // namespace flatline
