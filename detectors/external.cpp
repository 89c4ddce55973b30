// External detectors: processes, pipes, the lock-step replay, alarm parsing and the limits
// (detectors/external.h, docs/DETECTORS.md).
#include "detectors/external.h"

#include "core/input_file.h"
#include "core/kept_process.h"
#include "core/printable.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "detectors/causes.h"
#include "telemetry/jsonl.h"

extern char** environ;

namespace flatline {
namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr size_t kStderrTailBytes = 4096;  // what an error message quotes of a detector's stderr
constexpr int kStderrTailLines = 5;

// write(2) on a pipe whose reader is gone raises SIGPIPE, which would kill flatline. The signal is
// blocked around the write and a SIGPIPE it raised is taken back, so nothing process-wide (a
// SIG_IGN the ranks would inherit through exec) changes.
ssize_t write_no_sigpipe(int fd, const char* p, size_t n) {
  sigset_t pipe_set, old, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t r = ::write(fd, p, n);
  const int err = errno;
  if (r < 0 && err == EPIPE && !was_pending) {
    timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return r;
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) {
    const int c = WEXITSTATUS(st);
    return c == 127 ? "exited with status 127 (command not found?)" : fmt::format("exited with status {}", c);
  }
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return "ended";
}

// A small /proc file's text, "" if the process is gone (read(2) of a file of a process that has just
// exited fails with ESRCH, which libstdc++'s filebuf throws as ios_base::failure: plain read here).
std::string proc_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string s;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

// State letter of /proc/<pid>/stat ('R', 'S', 'D', 'Z', ...), 0 if gone.
char proc_state(pid_t pid) {
  const std::string s = proc_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t p = s.rfind(')');
  return p == std::string::npos || p + 2 >= s.size() ? 0 : s[p + 2];
}

// Is the detector waiting for input: the process the shell started and its descendants all asleep
// (or gone)? Checked before handing it the next record in lock-step (the header, "unpaced").
bool waiting(pid_t pid, int depth = 0) {
  const char st = proc_state(pid);
  if (st == 0 || st == 'Z') return true;
  if (st != 'S') return false;
  if (depth > 8) return true;
  std::istringstream kids(proc_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t k; kids >> k;)
    if (!waiting(k, depth + 1)) return false;
  return true;
}

std::string snippet(std::string_view s) {
  std::string out(s.substr(0, 80));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return s.size() > 80 ? out + "..." : out;
}

struct Line {
  std::string text;  // the record's JSON line, '\n' included
  int64_t step;
  double t;
};

}  // namespace

ExternalDetectorSpec parse_detector_spec(const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("--detector '" + s + "': expected NAME=COMMAND");
  ExternalDetectorSpec d{s.substr(0, eq), s.substr(eq + 1)};
  if (d.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos ||
      d.name == "." || d.name == "..")
    throw std::invalid_argument("--detector '" + printable(s.substr(0, 100)) +
                                "': the name must be letters, digits, '.', '_' or '-'");
  if (d.name.size() > kMaxDetectorNameBytes)  // it names files, directories and JUnit suites
    throw std::invalid_argument(fmt::format("--detector: the name '{}...' is {} characters; at most {}",
                                            d.name.substr(0, 40), d.name.size(), kMaxDetectorNameBytes));
  if (d.command.find_first_not_of(" \t") == std::string::npos)
    throw std::invalid_argument("--detector '" + s + "': empty command");
  return d;
}

std::string shell_script(const std::string& command) {
  // A list, a pipeline, a background job or a subshell (an operator outside quotes) is not one command;
  // redirections and expansions are (exec applies them to the command).
  char quote = 0;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"') ++i;
    } else if (c == '\\') {
      ++i;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '\n' || c == '\r') {
      return command;
    }
  }
  if (quote) return command;  // unbalanced: the shell will say so
  const size_t b = command.find_first_not_of(" \t");
  if (b == std::string::npos) return command;
  const std::string first = command.substr(b, command.find_first_of(" \t", b) - b);
  if (first.find('=') != std::string::npos) return command;  // FOO=1 cmd: exec would take FOO=1 for the program
  static const char* kNotExecutable[] = {"if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until",
                                         "do", "done", "!", "{", "}", "[[", "function", "time", "cd", "export", "exit",
                                         "set", "unset", ".", "source", "eval", "exec", "ulimit", "umask", "trap",
                                         "readonly", "shift", "wait", "alias"};
  for (const char* w : kNotExecutable)
    if (first == w) return command;
  return "exec " + command;
}

const std::vector<std::string>& alarm_causes() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> v;
    for (const auto& cause : cause_table())
      if (!is_healthy(cause.id)) v.push_back(cause.id);  // unexplained_plateau too: scored as the built-in's
    return v;
  }();
  return c;
}

const char* to_string(FeedMode m) {
  switch (m) {
    case FeedMode::live: return "live";
    case FeedMode::paced: return "paced";
    case FeedMode::unpaced: return "unpaced";
  }
  return "?";
}

struct DetectorFeed::Impl {
  struct Det {
    ExternalDetectorSpec spec;
    std::string run_dir;
    std::vector<std::pair<std::string, std::string>> env;
    pid_t pid = -1;
    int in = -1, out = -1, err = -1, err_file = -1;
    size_t err_kept = 0, err_dropped = 0;  // stderr bytes written to err_file, and past its bound
    size_t next = 0, off = 0;          // next record to write; bytes of it written
    uint64_t written = 0;              // bytes written to its stdin
    std::vector<uint64_t> ends;        // cumulative end offset of each record written
    size_t consumed = 0;               // records read by the detector
    bool input_closed = false, done = false;
    bool closed_by_us = false;         // stdin closed at the end of its input (not by the detector)
    size_t shown = 0;                  // records handed to its view of the run (on_release): its files
    bool reverted = false;             // taken for a watcher by its silence, then it read its stdin
    double first_write_at = 0, all_shown_at = 0, term_at = 0;
    double clock_wall0 = 0, clock_t0 = 0;  // a watcher's clock (unpaced): recorded t clock_t0 at wall clock_wall0
    double progress_at = 0, closed_at = 0, start = 0;
    std::string outbuf, errtail;
    std::vector<std::string> pending;  // complete stdout lines not yet parsed (stamped after consumption is read)
    size_t out_lines = 0, out_bytes = 0;
    ExternalOutcome res;
  };

  FeedOptions o;
  std::vector<Det> dets;
  std::vector<Line> recs;                 // released records, in the order fed
  uint64_t released_bytes = 0;
  std::vector<Record> held;               // live: not yet released (time-order merge)
  std::map<int, double> rank_t;           // live: latest t seen per rank
  double run_t = 0;
  std::set<std::string> causes;
  bool finishing = false;                 // finish() was called: the input is complete

  // Unpaced: the recorded time a file watcher's view has reached: from the newest record in its files
  // when it became a watcher (the first record's, if none), on at watcher_speed x the wall clock.
  double watcher_clock(Det& d) {
    if (d.clock_wall0 == 0) {
      d.clock_wall0 = wall_now();
      d.clock_t0 = 0;
      for (size_t i = d.shown; i-- > 0;)
        if (std::isfinite(recs[i].t)) {
          d.clock_t0 = recs[i].t;
          break;
        }
      if (d.shown == 0)
        for (const auto& l : recs)
          if (std::isfinite(l.t)) {
            d.clock_t0 = l.t;
            break;
          }
    }
    return d.clock_t0 + (wall_now() - d.clock_wall0) * o.watcher_speed;
  }

  // Hands records [shown, upto) to detector d's view of the run (a replay's re-enactment).
  void show(Det& d, size_t upto) {
    for (; d.shown < upto && d.shown < recs.size(); ++d.shown)
      if (o.on_release) o.on_release(static_cast<size_t>(&d - dets.data()), reconstruct(d.shown));
  }

  // A detector that closed its stdin before its end, or has read nothing of it kWatcherAfterS after its
  // first record was written, reads files: from now on it is fed by time (see kWatcherAfterS).
  void classify(Det& d, double now) {
    if (!d.res.error.empty()) return;
    // closed: a write failed with EPIPE, or the pipe says its read end is gone (POLLERR on the write
    // end), which lock-step sees before it writes again; checked for a watcher too (one classified by
    // its silence that closes stdin later has declared itself)
    if (!d.input_closed && d.in >= 0 && d.first_write_at > 0) {
      pollfd p{d.in, 0, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) {
        d.input_closed = true;
        close_fd(d.in);
      }
    }
    // A slow starter (a Python detector importing transformers reads its first line after seconds)
    // that begins to read its stdin is a stdin reader after all: it sets the pace again, and is not
    // ended at the end as a watcher is.
    if (d.res.watcher && d.consumed > 0 && !(d.input_closed && !d.closed_by_us) && d.term_at == 0) {
      d.res.watcher = false;
      d.reverted = true;
      d.clock_wall0 = 0;
      d.all_shown_at = 0;
      return;
    }
    if (d.res.watcher) return;
    const bool closed_itself = d.input_closed && !d.closed_by_us;
    const bool never_read = d.consumed == 0 && d.first_write_at > 0 && now - d.first_write_at > kWatcherAfterS &&
                            d.written > 0;
    if (closed_itself || never_read) d.res.watcher = true;
  }

  Impl(std::vector<ExternalDetectorSpec> specs, FeedOptions opts) : o(std::move(opts)) {
    causes.insert(alarm_causes().begin(), alarm_causes().end());
    std::set<std::string> names;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!names.insert(specs[i].name).second)
        throw std::invalid_argument("two detectors named '" + specs[i].name + "'");
      Det d;
      d.spec = specs[i];
      d.res.name = specs[i].name;
      d.run_dir = i < o.run_dirs.size() && !o.run_dirs[i].empty() ? o.run_dirs[i] : o.run_dir;
      if (i < o.run_envs.size()) d.env = o.run_envs[i];
      dets.push_back(std::move(d));
    }
    for (auto& d : dets) start(d);
  }

  ~Impl() {
    for (auto& d : dets) kill_group(d);
    for (auto& d : dets) reap(d, /*block=*/true);
  }

  // --- processes --------------------------------------------------------------------------------
  void start(Det& d) {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
      throw std::runtime_error(std::string("detector ") + d.spec.name + ": pipe: " + std::strerror(errno));
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      const std::string v = *e;
      if (v.rfind("FLATLINE_RUN_DIR=", 0) && v.rfind("FLATLINE_WORLD_SIZE=", 0) && v.rfind("FLATLINE_DETECTOR=", 0) &&
          v.rfind("FLATLINE_FEED=", 0))
        env_s.push_back(v);
    }
    env_s.push_back("FLATLINE_RUN_DIR=" + d.run_dir);
    env_s.push_back("FLATLINE_WORLD_SIZE=" + std::to_string(o.world_size));
    env_s.push_back("FLATLINE_DETECTOR=" + d.spec.name);
    env_s.push_back(std::string("FLATLINE_FEED=") + to_string(o.mode));
    for (const auto& [k, v] : o.env) env_s.push_back(k + "=" + v);
    for (const auto& [k, v] : d.env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& v : env_s) envp.push_back(v.data());
    envp.push_back(nullptr);
    const std::string script = shell_script(d.spec.command);
    const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
    if (!o.stderr_dir.empty())
      d.err_file = ::open((o.stderr_dir + "/" + d.spec.name + ".stderr").c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    d.start = d.progress_at = wall_now();
    // Under a keeper (core/kept_process.h): its own process group, and every descendant, setsid or
    // not, ends with it and with flatline, even when flatline is SIGKILLed.
    const pid_t pid = spawn_kept("/bin/sh", const_cast<char* const*>(argv), envp.data(), in[0], out[1], err[1]);
    if (pid < 0) throw std::runtime_error(std::string("detector ") + d.spec.name + ": fork: " + std::strerror(errno));
    d.pid = pid;
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    d.in = in[1];
    d.out = out[0];
    d.err = err[0];
    for (int fd : {d.in, d.out, d.err}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  // The whole tree, through its keeper (a SIGKILL to the group would leave what left it to init).
  void kill_group(Det& d) {
    if (d.pid > 0 && !d.done) ::kill(d.pid, kKeeperKillAll());
  }

  void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // Collects the exit status; returns true once the process is gone.
  bool reap(Det& d, bool block) {
    if (d.pid <= 0) return true;
    int st = 0;
    const pid_t r = waitpid(d.pid, &st, block ? 0 : WNOHANG);
    if (r == 0) return false;
    if (r == d.pid) {
      d.res.exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
      read_output(d);  // what it wrote before it exited
      read_stderr(d);
      settle(d);
      if (d.res.error.empty() && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !d.res.ended_by_harness)
        fail(d, describe_status(st));
      if (d.res.error.empty() && !d.outbuf.empty()) {  // a last line without its newline
        std::string last;
        last.swap(d.outbuf);
        alarm_line(d, last);
      }
    }
    ::kill(-d.pid, SIGKILL);  // its keeper is gone and took the tree along; anything left in its group too
    d.pid = -1;
    d.done = true;
    d.res.wall_s = wall_now() - d.start;
    close_fd(d.in);
    close_fd(d.out);
    close_fd(d.err);
    if (d.err_file >= 0 && d.err_dropped > 0) {
      const std::string note = fmt::format("\n[flatline: {} more bytes of stderr not kept: {} at most]\n", d.err_dropped,
                                           human_bytes(kMaxStderrKeptBytes));
      if (::write(d.err_file, note.data(), note.size()) < 0) {}
    }
    close_fd(d.err_file);
    return true;
  }

  void fail(Det& d, const std::string& why) {
    if (!d.res.error.empty()) return;
    std::string tail;
    {
      std::vector<std::string> lines;
      std::istringstream in(d.errtail);
      for (std::string l; std::getline(in, l);)
        if (!l.empty()) lines.push_back(l);
      const size_t from = lines.size() > kStderrTailLines ? lines.size() - kStderrTailLines : 0;
      for (size_t i = from; i < lines.size(); ++i) tail += (tail.empty() ? "" : "\n") + lines[i];
    }
    d.res.stderr_tail = tail;
    d.res.error = why;
    kill_group(d);
  }

  // --- output -----------------------------------------------------------------------------------
  // The step and time an alarm is stamped with (docs/DETECTORS.md "Stamps"): never before the newest
  // data the detector could have seen when it came.
  //  - live: the newest record released, or the newest step in the run's files on disk, whichever is
  //    later (every detector may read the files the ranks write, and they run ahead of the feed);
  //  - replays: its view of the run (re-enacted as fed: a record is in its files before its stdin)
  //    and the records it read: unpaced, the newer of the two, at that record's time; paced, the newest
  //    released, at the replay clock.
  void stamp(const Det& d, ExternalAlarm& a) const {
    if (o.mode == FeedMode::live) {
      if (!recs.empty()) a.step = recs.back().step;
      if (o.newest_step_on_disk) a.step = std::max<int64_t>(a.step, o.newest_step_on_disk());
      a.t = run_t;
    } else if (o.mode == FeedMode::unpaced) {
      // A slow starter taken for a watcher had its files run ahead by the watcher clock while it was
      // still starting; it reads its stdin, and its stamps are the records it read.
      const size_t seen = d.reverted ? d.consumed : std::max(d.consumed, d.shown);
      if (seen > 0) {
        a.step = recs[seen - 1].step;
        a.t = recs[seen - 1].t;
      }
    } else {
      if (!recs.empty()) a.step = recs.back().step;
      a.t = run_t;
    }
  }

  void alarm_line(Det& d, std::string_view line) {
    ++d.out_lines;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
    using nlohmann::json;
    const std::string where = fmt::format("stdout line {}", d.out_lines);
    json j = json::parse(line.begin(), line.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return fail(d, fmt::format("garbage on {}: not a JSON object: '{}'", where, snippet(line)));
    ExternalAlarm a;
    a.line = d.out_lines;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      if (k == "cause") {
        if (v.is_null()) continue;
        if (!v.is_string()) return fail(d, fmt::format("garbage on {}: 'cause' must be a string", where));
        a.cause = v.get<std::string>();
        if (!causes.count(a.cause)) {
          std::string list;
          for (const auto& c : alarm_causes()) list += (list.empty() ? "" : ", ") + c;
          return fail(d, fmt::format("garbage on {}: unknown cause '{}' (expected one of: {}; or none)", where,
                                     snippet(a.cause), list));
        }
      } else if (k == "rank") {
        if (v.is_null()) continue;
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= o.world_size)
          return fail(d, fmt::format("garbage on {}: 'rank' must be an integer in [0, {}), got {}", where,
                                     o.world_size, snippet(v.dump())));
        a.rank = static_cast<int>(v.get<int64_t>());
      } else if (k == "evidence") {
        if (v.is_string()) {
          a.evidence.push_back(v.get<std::string>());
        } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
          for (const auto& e : v) a.evidence.push_back(e.get<std::string>());
        } else if (!v.is_null()) {
          return fail(d, fmt::format("garbage on {}: 'evidence' must be a string or a list of strings", where));
        }
      } else if (k == "step") {
        if (!v.is_number_integer()) return fail(d, fmt::format("garbage on {}: 'step' must be an integer", where));
        a.claimed_step = v.get<int64_t>();
      } else if (k == "confidence") {
        if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1))
          return fail(d, fmt::format("garbage on {}: 'confidence' must be a number in [0, 1]", where));
        a.confidence = v.get<double>();
      } else {
        return fail(d, fmt::format("garbage on {}: unknown key '{}' (expected cause, rank, evidence, step, confidence)",
                                   where, snippet(k)));
      }
    }
    stamp(d, a);
    d.res.alarms.push_back(std::move(a));
    if (d.res.alarms.size() > o.limits.max_alarms)
      fail(d, fmt::format("flood: more than {} alarm lines", o.limits.max_alarms));
  }

  // Reads what the detector wrote on stdout into complete lines; returns true if anything came. The
  // lines are parsed by settle(), after the records the detector has read are counted: whatever it
  // wrote before this read, it wrote having read at most those records.
  bool read_output(Det& d) {
    if (d.out < 0) return false;
    bool any = false;
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(d.out, buf, sizeof buf);
      if (n <= 0) break;
      any = true;
      d.out_bytes += static_cast<size_t>(n);
      if (!d.res.error.empty()) continue;  // drained, not parsed
      d.outbuf.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = d.outbuf.find('\n', start)) != std::string::npos; start = nl + 1)
        d.pending.push_back(d.outbuf.substr(start, nl - start));
      d.outbuf.erase(0, start);
      if (d.out_bytes > o.limits.max_stdout_bytes) {
        d.pending.clear();
        fail(d, fmt::format("flood: more than {} bytes on stdout", o.limits.max_stdout_bytes));
      } else if (d.outbuf.size() > o.limits.max_line_bytes) {
        fail(d, fmt::format("garbage on stdout line {}: no newline within {} bytes", d.out_lines + d.pending.size() + 1,
                            o.limits.max_line_bytes));
      }
      // Enough lines to exceed the alarm limit: parse them before reading on, so that the limit the
      // output reaches first (in its own order) is the one reported, however fast it was written.
      if (d.res.alarms.size() + d.pending.size() > o.limits.max_alarms) break;
    }
    return any;
  }

  // Counts what the detector has read, then parses and stamps the lines collected before.
  void settle(Det& d) {
    update_consumed(d);
    for (const auto& l : d.pending) {
      if (!d.res.error.empty()) break;
      alarm_line(d, l);
    }
    d.pending.clear();
  }

  void read_stderr(Det& d) {
    if (d.err < 0) return;
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(d.err, buf, sizeof buf);
      if (n <= 0) break;
      if (d.err_file >= 0) {  // kept up to kMaxStderrKeptBytes; beyond, counted, and the file says so at the end
        const size_t room = d.err_kept < kMaxStderrKeptBytes ? kMaxStderrKeptBytes - d.err_kept : 0;
        const size_t take = std::min(room, static_cast<size_t>(n));
        if (take > 0 && ::write(d.err_file, buf, take) < 0) close_fd(d.err_file);
        d.err_kept += take;
        d.err_dropped += static_cast<size_t>(n) - take;
      }
      d.errtail.append(buf, static_cast<size_t>(n));
      if (d.errtail.size() > 2 * kStderrTailBytes) d.errtail.erase(0, d.errtail.size() - kStderrTailBytes);
    }
  }

  // --- input ------------------------------------------------------------------------------------
  void update_consumed(Det& d) {
    if (d.in < 0 || d.input_closed) return;
    int unread = 0;
    if (ioctl(d.in, FIONREAD, &unread) != 0) return;
    const uint64_t read_bytes = d.written - static_cast<uint64_t>(unread);
    const size_t before = d.consumed;
    while (d.consumed < d.ends.size() && d.ends[d.consumed] <= read_bytes) ++d.consumed;
    if (d.consumed != before) {
      d.progress_at = wall_now();
      d.res.records_read = static_cast<int64_t>(d.consumed);
    }
  }

  // Writes records [next, upto) as far as the pipe takes them; false on EPIPE (stdin closed).
  void write_records(Det& d, size_t upto) {
    while (d.next < upto && !d.input_closed && d.res.error.empty()) {
      const Line& l = recs[d.next];
      if (d.off == 0) show(d, d.next + 1);  // its files have the record before its stdin does
      const ssize_t n = write_no_sigpipe(d.in, l.text.data() + d.off, l.text.size() - d.off);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        d.input_closed = true;  // EPIPE: it closed its stdin (reads files only) or is exiting
        close_fd(d.in);
        return;
      }
      if (d.written == 0) d.first_write_at = wall_now();
      d.off += static_cast<size_t>(n);
      d.written += static_cast<uint64_t>(n);
      if (d.off == l.text.size()) {
        d.ends.push_back(d.written);
        d.off = 0;
        ++d.next;
        d.res.records_fed = static_cast<int64_t>(d.next);
      }
    }
  }

  // on_release gets the Record again (re-parsed from its line: the only copy kept).
  std::vector<Record> released_records;
  Record reconstruct(size_t i) { return released_records[i]; }

  void release(const Record& r) {
    std::string text = to_json(r);
    text += '\n';
    released_bytes += text.size();
    recs.push_back({std::move(text), r.step, r.t});
    if (o.on_release) released_records.push_back(r);
  }

  // live: records each rank has passed go out in time order; a rank's record waits at most kLiveHoldS.
  void release_held(bool all) {
    if (held.empty()) return;
    double watermark = std::numeric_limits<double>::infinity();
    for (const auto& [rank, t] : rank_t) watermark = std::min(watermark, t);
    std::stable_sort(held.begin(), held.end(), [](const Record& a, const Record& b) { return a.t < b.t; });
    size_t n = 0;
    while (n < held.size() && (all || !std::isfinite(held[n].t) || held[n].t <= watermark ||
                               held[n].t <= run_t - kLiveHoldS))
      release(held[n++]);
    held.erase(held.begin(), held.begin() + static_cast<long>(n));
  }

  // A signal stops the run: SIGTERM to every detector's group at once, its tree killed kStopGraceS later.
  double stopping_since = 0;
  void stop_if_interrupted(double now) {
    if (stopping_since == 0 && o.interrupted) {
      if (const int sig = o.interrupted()) {
        stopping_since = now;
        for (auto& d : dets) {
          if (d.done) continue;
          d.res.interrupted = true;
          if (d.res.error.empty()) d.res.error = fmt::format("interrupted: the run was stopped ({})", strsignal(sig));
          if (d.pid > 0) ::kill(-d.pid, SIGTERM);  // the keeper waits; the detector may flush and go
        }
      }
    }
    if (stopping_since > 0 && now - stopping_since > kStopGraceS)
      for (auto& d : dets) kill_group(d);
  }

  bool pump_once(double now_run_t) {
    run_t = now_run_t;
    if (o.mode == FeedMode::live) release_held(false);
    bool progress = false;
    const double now = wall_now();
    stop_if_interrupted(now);
    for (auto& d : dets) {
      if (d.done) continue;
      if (!d.res.error.empty()) {
        read_output(d);  // an interrupted detector's last alarms still count
        read_stderr(d);
        progress |= reap(d, false);
        continue;
      }
      progress |= read_output(d);
      read_stderr(d);
      const size_t before = d.consumed;
      settle(d);
      progress |= d.consumed != before;
      classify(d, now);
      if (d.res.error.empty() && d.res.watcher) {
        // A file watcher: its view of the run grows by time, whatever it reads (unpaced: the recorded
        // clock x watcher_speed; paced and live: as records are released); stdin gets what the pipe takes.
        size_t upto = recs.size();
        if (o.mode == FeedMode::unpaced) {
          const double clock = watcher_clock(d);
          upto = d.shown;
          while (upto < recs.size() && !(recs[upto].t > clock)) ++upto;
        }
        progress |= upto != d.shown;
        show(d, upto);
        if (!d.input_closed) write_records(d, d.shown);
        d.progress_at = now;
        end_watcher(d, now);
      } else if (d.res.error.empty() && o.mode == FeedMode::unpaced) {
        // Lock-step: the next record only once the last is read and the detector waits again; what it
        // wrote up to that moment is stamped with the records it had read.
        if (!d.input_closed && d.next < recs.size() && d.off == 0 && d.consumed == d.next &&
            (d.next == 0 || waiting(d.pid))) {
          read_output(d);
          settle(d);
          if (d.res.error.empty()) write_records(d, d.next + 1);
          progress = true;
        }
      } else if (d.res.error.empty()) {
        write_records(d, recs.size());
        const uint64_t backlog = released_bytes - d.written;
        if (backlog > o.limits.max_backlog_bytes)
          fail(d, fmt::format("fell behind: more than {} bytes of telemetry not read", o.limits.max_backlog_bytes));
      }
      // The stall clock runs only while records wait for it.
      if (d.input_closed || d.consumed >= recs.size()) d.progress_at = now;
      if (d.res.watcher) {
        progress |= reap(d, false);
        continue;  // a watcher is never an error for what it does not read, nor for running at the end
      }
      if (now - d.progress_at > o.limits.stall_s)
        fail(d, d.consumed == 0
                    ? fmt::format("never read stdin: {} record(s) waiting for {:.0f} s", recs.size() - d.consumed,
                                  o.limits.stall_s)
                    : fmt::format("stopped reading stdin after {} of {} records: nothing read for {:.0f} s",
                                  d.consumed, recs.size(), o.limits.stall_s));
      if (d.closed_at > 0 && now - d.closed_at > o.limits.exit_s) {
        const std::string hang = fmt::format("did not exit within {:.0f} s of the end of its input", o.limits.exit_s);
        if (d.consumed == 0 && d.next > 0)
          fail(d, fmt::format("never read stdin: none of {} records read ({})", d.next, hang));
        else if (d.consumed < d.next)
          fail(d, fmt::format("stopped reading stdin after {} of {} records ({})", d.consumed, d.next, hang));
        else
          fail(d, "hang: " + hang);
      }
      progress |= reap(d, false);
    }
    return progress;
  }

  // The end of a watcher, once the input is complete and all of it is in its files: kWatcherSettleS to
  // read them, SIGTERM, and its tree killed kStopGraceS later. Its alarms until then count.
  void end_watcher(Det& d, double now) {
    if (!finishing || d.shown < recs.size() || d.done) return;
    if (d.all_shown_at == 0) d.all_shown_at = now;
    // One that closed its stdin said what it is; one that only never read it may be a slow starter
    // still importing its libraries (it becomes a stdin reader the moment it reads: classify).
    // So that one is never ended sooner than a stdin reader would be called stalled: stall_s after it
    // started.
    const bool declared = d.input_closed && !d.closed_by_us;
    if (d.term_at == 0 && now - d.all_shown_at > kWatcherSettleS && (declared || now - d.start > o.limits.stall_s)) {
      read_output(d);
      settle(d);
      d.res.ended_by_harness = true;
      d.term_at = now;
      if (!d.input_closed) {
        close_fd(d.in);
        d.input_closed = d.closed_by_us = true;
      }
      if (d.pid > 0) ::kill(-d.pid, SIGTERM);
    }
    if (d.term_at > 0 && now - d.term_at > kStopGraceS) kill_group(d);
  }

  void wait_output(int timeout_ms) {
    if (timeout_ms <= 0) return;
    std::vector<pollfd> fds;
    for (const auto& d : dets)
      if (!d.done) {
        if (d.out >= 0) fds.push_back({d.out, POLLIN, 0});
        if (d.err >= 0) fds.push_back({d.err, POLLIN, 0});
      }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return;
    }
    ::poll(fds.data(), fds.size(), timeout_ms);
  }
};

DetectorFeed::DetectorFeed(std::vector<ExternalDetectorSpec> detectors, FeedOptions o)
    : impl_(std::make_unique<Impl>(std::move(detectors), std::move(o))) {}
DetectorFeed::~DetectorFeed() = default;
size_t DetectorFeed::size() const { return impl_->dets.size(); }

void DetectorFeed::push(const Record& r) {
  if (impl_->o.mode == FeedMode::live) {
    impl_->held.push_back(r);
    if (std::isfinite(r.t)) {
      double& t = impl_->rank_t[r.rank];
      t = std::max(t, r.t);
    }
  } else {
    impl_->release(r);
  }
}

void DetectorFeed::pump(double run_t, int timeout_ms) {
  impl_->pump_once(run_t);
  impl_->wait_output(timeout_ms);
  impl_->pump_once(run_t);
}

bool DetectorFeed::stopped() const {
  if (impl_->stopping_since == 0) return false;
  for (const auto& d : impl_->dets)
    if (!d.done) return false;
  return true;
}

bool DetectorFeed::drained() const {
  for (const auto& d : impl_->dets)
    if (!d.done && !d.input_closed && d.consumed < impl_->recs.size()) return false;
  return true;
}

std::vector<ExternalOutcome> DetectorFeed::finish(double run_t) {
  Impl& m = *impl_;
  m.finishing = true;
  m.run_t = run_t;
  m.release_held(true);
  const double t_wall = wall_now();
  for (int spins = 0;; ++spins) {
    const double rt = run_t + (wall_now() - t_wall);
    const bool progress = m.pump_once(rt);
    bool all_done = true;
    for (auto& d : m.dets) {
      if (d.done) continue;
      all_done = false;
      // stdin is closed once everything it should get is written and read (what it read is then
      // known exactly; one that stops reading meets the stall rule instead of waiting forever)
      const bool all_written = d.next == m.recs.size() && d.off == 0;
      const bool all_read = d.consumed == m.recs.size();
      if (!d.input_closed && all_written && all_read) {  // a watcher's is closed as it is ended (end_watcher)
        m.read_output(d);
        m.settle(d);
        m.close_fd(d.in);
        d.input_closed = d.closed_by_us = true;
      }
      if (d.input_closed && d.closed_at == 0) d.closed_at = wall_now();
    }
    if (all_done) break;
    if (!progress) {
      const bool watching = std::any_of(m.dets.begin(), m.dets.end(), [](const auto& d) { return !d.done && d.res.watcher; });
      if (m.o.mode == FeedMode::unpaced && !watching && spins % 64 != 63) sched_yield();
      else m.wait_output(2);
    }
  }
  std::vector<ExternalOutcome> out;
  for (auto& d : m.dets) out.push_back(d.res);
  return out;
}

std::vector<ExternalOutcome> feed_recorded(const std::vector<Record>& records,
                                           const std::vector<ExternalDetectorSpec>& detectors, FeedOptions o,
                                           double speed) {
  const FeedMode mode = o.mode;
  if (mode == FeedMode::unpaced) o.watcher_speed = speed;
  DetectorFeed f(detectors, std::move(o));
  if (mode == FeedMode::unpaced) {
    for (const auto& r : records) f.push(r);
    return f.finish(0);  // lock-step happens in finish()'s pump loop
  }
  // paced: records go out at their recorded t / speed, on a clock that starts at the first record
  double t0 = NAN;
  for (const auto& r : records)
    if (std::isfinite(r.t)) {
      t0 = r.t;
      break;
    }
  if (!std::isfinite(t0)) t0 = 0;
  const double start = wall_now();
  auto clock = [&] { return t0 + (wall_now() - start) * speed; };
  for (const auto& r : records) {
    while (std::isfinite(r.t) && clock() < r.t && !f.stopped()) {
      const double wait_ms = (r.t - clock()) / speed * 1000;
      f.pump(clock(), static_cast<int>(std::clamp(wait_ms, 0.0, 10.0)));
    }
    if (f.stopped()) break;  // a stop ended every detector: the rest of the run is not fed
    f.push(r);
    f.pump(clock(), 0);
  }
  return f.finish(clock());
}

}  // namespace flatline
