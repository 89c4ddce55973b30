// External detectors: their processes (core/supervisor.h), pipes, the lock-step replay, the stamps and
// the limits (external/feed.h, docs/DETECTORS.md); their alarm lines are read by external/alarm.cpp.
#include "external/feed.h"

#include "core/input_file.h"
#include "core/supervisor.h"
#include "core/printable.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
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

#include "run/causes.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr size_t kStderrTailBytes = 4096;  // what an error message quotes of a detector's stderr
constexpr int kStderrTailLines = 5;

struct Line {
  std::string text;  // the record's JSON line, '\n' included
  int64_t step;
  double t;
};

}  // namespace

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
    std::optional<Child> proc;         // under a keeper (core/supervisor.h: ChildGroup::kept)
    OutputKeeper errors;               // its stderr: to stderr_dir/<name>.stderr (up to kMaxStderrKeptBytes) and a tail
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
    std::string outbuf;
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
    if (!d.input_closed && d.proc->in() >= 0 && d.first_write_at > 0) {
      pollfd p{d.proc->in(), 0, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) {
        d.input_closed = true;
        close_fd(d.proc->in());
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
    std::vector<std::pair<std::string, std::string>> vars = {{"FLATLINE_RUN_DIR", d.run_dir},
                                                             {"FLATLINE_WORLD_SIZE", std::to_string(o.world_size)},
                                                             {"FLATLINE_DETECTOR", d.spec.name},
                                                             {"FLATLINE_FEED", to_string(o.mode)}};
    vars.insert(vars.end(), o.env.begin(), o.env.end());
    vars.insert(vars.end(), d.env.begin(), d.env.end());
    ChildSpec spec;
    spec.argv = {"/bin/sh", "-c", shell_script(d.spec.command)};
    spec.env = child_environment(vars);
    spec.group = ChildGroup::kept;  // every descendant, setsid or not, ends with it and with flatline
    spec.what = "detector " + d.spec.name;
    d.errors.file_limit = kMaxStderrKeptBytes;
    d.errors.tail_limit = kStderrTailBytes;
    if (!o.stderr_dir.empty())
      d.errors.file = ::open((o.stderr_dir + "/" + d.spec.name + ".stderr").c_str(),
                             O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    d.start = d.progress_at = wall_now();
    d.proc.emplace(spec);
  }

  // The whole tree, through its keeper (a SIGKILL to the group would leave what left it to init).
  void kill_group(Det& d) {
    if (d.proc && !d.done) d.proc->kill();
  }

  static void close_fd(int& fd) { Child::close_fd(fd); }

  // Collects the exit status; returns true once the process is gone.
  bool reap(Det& d, bool block) {
    if (d.done) return true;
    if (!d.proc->reap(block)) return false;
    if (d.proc->status() >= 0) {
      d.res.exit_status = d.proc->status();
      read_output(d);  // what it wrote before it exited
      read_stderr(d);
      settle(d);
      if (d.res.error.empty() && d.res.exit_status != 0 && !d.res.ended_by_harness)
        fail(d, describe_exit(d.proc->wait_status()));
      if (d.res.error.empty() && !d.outbuf.empty()) {  // a last line without its newline
        std::string last;
        last.swap(d.outbuf);
        alarm_line(d, last);
      }
    }
    d.done = true;
    d.res.wall_s = wall_now() - d.start;
    close_fd(d.proc->in());
    close_fd(d.proc->out());
    close_fd(d.proc->err());
    if (d.errors.file >= 0 && d.errors.dropped > 0) {
      const std::string note = fmt::format("\n[flatline: {} more bytes of stderr not kept: {} at most]\n",
                                           d.errors.dropped, human_bytes(kMaxStderrKeptBytes));
      if (::write(d.errors.file, note.data(), note.size()) < 0) {}
    }
    d.errors.close_file();
    return true;
  }

  void fail(Det& d, const std::string& why) {
    if (!d.res.error.empty()) return;
    std::string tail;
    {
      std::vector<std::string> lines;
      std::istringstream in(d.errors.tail);
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
    ExternalAlarm a;
    const std::string garbage = parse_alarm(line, ++d.out_lines, o.world_size, causes, a);
    if (!garbage.empty()) return fail(d, garbage);
    if (a.line == 0) return;  // a blank line
    stamp(d, a);
    d.res.alarms.push_back(std::move(a));
    if (d.res.alarms.size() > o.limits.max_alarms)
      fail(d, fmt::format("flood: more than {} alarm lines", o.limits.max_alarms));
  }

  // Reads what the detector wrote on stdout into complete lines; returns true if anything came. The
  // lines are parsed by settle(), after the records the detector has read are counted: whatever it
  // wrote before this read, it wrote having read at most those records.
  bool read_output(Det& d) {
    if (d.proc->out() < 0) return false;
    bool any = false;
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(d.proc->out(), buf, sizeof buf);
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

  void read_stderr(Det& d) { Child::drain(d.proc->err(), d.errors); }

  // --- input ------------------------------------------------------------------------------------
  void update_consumed(Det& d) {
    if (d.proc->in() < 0 || d.input_closed) return;
    int unread = 0;
    if (ioctl(d.proc->in(), FIONREAD, &unread) != 0) return;
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
      const ssize_t n = Child::write_in(d.proc->in(), l.text.data() + d.off, l.text.size() - d.off);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        d.input_closed = true;  // EPIPE: it closed its stdin (reads files only) or is exiting
        close_fd(d.proc->in());
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
          d.proc->signal(SIGTERM);  // to its group: the keeper waits; the detector may flush and go
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
            (d.next == 0 || d.proc->asleep())) {
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
        close_fd(d.proc->in());
        d.input_closed = d.closed_by_us = true;
      }
      d.proc->signal(SIGTERM);
    }
    if (d.term_at > 0 && now - d.term_at > kStopGraceS) kill_group(d);
  }

  void wait_output(int timeout_ms) {
    if (timeout_ms <= 0) return;
    std::vector<pollfd> fds;
    for (const auto& d : dets)
      if (!d.done) {
        if (d.proc->out() >= 0) fds.push_back({d.proc->out(), POLLIN, 0});
        if (d.proc->err() >= 0) fds.push_back({d.proc->err(), POLLIN, 0});
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
        Impl::close_fd(d.proc->in());
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
