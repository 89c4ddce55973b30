// External detectors (docs/DETECTORS.md): any program, started through /bin/sh -c, that reads a run's
// telemetry records (telemetry/jsonl.h, one JSON object a line, ranks merged in time order) on its
// stdin and writes alarms on its stdout, one JSON object a line. Plain C++ (POSIX), no torch: the
// launcher calls it from its poll loop (live runs) and `flatline score` from a replay of a recorded
// run, never from the ranks' path, so a slow or broken detector never slows or blocks training.
//
// Its processes run under the supervisor (core/supervisor.h, ChildGroup::kept); its alarm lines are read
// by external/alarm.h, and the harness stamps each alarm on arrival with the step and run time it had
// reached, so latency is measured by the harness:
//
// Stamps, per mode:
//   live     the run's front: the step of the latest record released to the detectors (records are
//            released in time order once every rank has passed them, or after kLiveHoldS), and the
//            run time (wall clock since the run's start) at arrival. A slow detector is late.
//   paced    (--realtime replay) the same, on the replay's clock: records are released at their
//            recorded t / speed.
//   unpaced  (replay as fast as the detector reads) lock-step: one record in the pipe at a time, the
//            next only once the detector has read it and is waiting for input again (its processes
//            all asleep, /proc/<pid>/stat), so an alarm is stamped with the step and t of the last
//            record it had read. Exact for a detector that handles its input in one thread; one that
//            reads on a thread of its own, or sleeps between reads, can be stamped a record late.
//
// Errors (the run is scored "detector error" with the reason; everything else goes on): it exits
// non-zero or is killed (status, signal, last stderr lines); prints garbage (the line number and
// why); floods (more than kMaxAlarms alarm lines or kMaxStdoutBytes); stops reading stdin while
// records wait for `stall_s` ("never read stdin" if it read nothing); falls kMaxBacklogBytes behind a
// live run; does not exit within `exit_s` of its stdin being closed at the end of the stream. A
// detector that closes its stdin (to read only files) is not an error: the feed to it stops.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "external/alarm.h"
#include "telemetry/record.h"

namespace flatline {

// A detector's stderr kept in FeedOptions::stderr_dir/<name>.stderr: the first 1 MiB, then a line
// saying how much more there was (a detector that logs per record wrote 35 MB for one run).
constexpr size_t kMaxStderrKeptBytes = 1 << 20;

struct ExternalOutcome {
  std::string name;
  std::vector<ExternalAlarm> alarms;    // in arrival order: the first decides, the rest are reported
  std::string error;                    // "" = none; else why the run is scored "detector error"
  bool interrupted = false;             // the run was stopped by a signal before this detector was done
  int exit_status = -1;                 // exit code, or 128 + signal (137: killed, by itself or the harness)
  int64_t records_fed = 0;              // records written to its stdin
  int64_t records_read = 0;             // of those, read by the detector
  bool watcher = false;                 // fed by time as a file watcher (kWatcherAfterS)
  bool ended_by_harness = false;        // a watcher still running at the end: SIGTERM, its normal end
  double wall_s = 0;
  std::string stderr_tail;              // its last stderr lines
};

enum class FeedMode { live, paced, unpaced };
const char* to_string(FeedMode m);

// How long / how much, before a detector is an error. The defaults: a Python detector that imports
// torch or transformers takes ~5-10 s before it reads its first line on a busy 2-core machine; 1000
// alarms is ~4 per step of the main suite's runs, far past any detector that repeats an alarm per step
// on every rank; 64 MiB is ~160,000 records, more than one run of the main suite by two orders.
struct FeedLimits {
  double stall_s = 30;                    // records waiting, nothing read
  double exit_s = 30;                     // stdin closed, not exited
  size_t max_alarms = 1000;
  size_t max_stdout_bytes = 1 << 20;
  size_t max_line_bytes = 64 << 10;
  size_t max_backlog_bytes = 64u << 20;   // live and paced: records released but not yet written
};

// A stopped run's detectors have this long between SIGTERM and the end of their tree (the design's
// stop is 5 s in all: ranks and detectors stop side by side).
constexpr double kStopGraceS = 1.0;
// A file watcher (docs/DETECTORS.md "Two shapes"): a detector that closed its stdin, or has read
// nothing of it kWatcherAfterS after its first record was written (a shell that keeps the pipe open
// while its program closed its own copy, a watcher that never looks at stdin). It is fed by time, never
// an error for not reading; at the end, once every record is in its files, it has kWatcherSettleS to
// read them, then SIGTERM, then its tree is killed kStopGraceS later: its normal end, not an error.
// One that only never read its stdin (it did not close it) may be a slow starter still importing its
// libraries: it is not ended before FeedLimits::stall_s after it started (when a stdin reader that read
// nothing would have been an error), and becomes a stdin reader again the moment it reads.
constexpr double kWatcherAfterS = 2.0;
constexpr double kWatcherSettleS = 1.0;

// Live records are held at most this long for a rank that has not caught up before they are released
// out of time order (a hung rank still heartbeats every heartbeat_s; its peers must not wait for it).
constexpr double kLiveHoldS = 0.2;

struct FeedOptions {
  FeedMode mode = FeedMode::unpaced;
  std::string run_dir;                    // FLATLINE_RUN_DIR of every detector (see reenact below)
  int world_size = 1;                     // FLATLINE_WORLD_SIZE; alarms' ranks must be below it
  FeedLimits limits;
  std::string stderr_dir;                 // "": keep only the stderr tail; else <dir>/<name>.stderr
  std::vector<std::pair<std::string, std::string>> env;  // more variables (formats' paths)
  // Replays: called with each record as it is handed to detector `i` (before its stdin gets it), to
  // re-enact the run directory that detector sees at the pace it reads (telemetry, formats).
  std::function<void(size_t i, const Record&)> on_release;
  // The signal that is stopping the run (SIGTERM, SIGINT, SIGHUP to flatline), 0 while none: checked at
  // every pump. Once it says one, every detector still running gets SIGTERM (its group), then after
  // kStopGraceS its whole tree is killed; its outcome says "interrupted".
  std::function<int()> interrupted;
  // Replays: each detector's own FLATLINE_RUN_DIR and more variables (index = detector); empty: run_dir
  // and env for all.
  std::vector<std::string> run_dirs;
  std::vector<std::vector<std::pair<std::string, std::string>>> run_envs;
  // Unpaced replays: a file watcher's re-enactment advances by the recorded clock x this (--speed).
  double watcher_speed = 1.0;
  // Live: the newest step the run's files hold now (a file watcher's alarm is stamped with it: what it
  // could have read, never less); unset: the newest record released.
  std::function<int64_t()> newest_step_on_disk;
};

class DetectorFeed {
 public:
  DetectorFeed(std::vector<ExternalDetectorSpec> detectors, FeedOptions o);
  ~DetectorFeed();  // kills whatever is still running
  DetectorFeed(const DetectorFeed&) = delete;
  DetectorFeed& operator=(const DetectorFeed&) = delete;

  // live: records of each rank in that rank's order (merged in time order here); paced and unpaced:
  // records already in time order.
  void push(const Record& r);
  // Moves data (writes, reads alarms and stderr, checks the limits); waits up to timeout_ms for a
  // detector's output. `run_t`: the run clock now (live, paced; ignored unpaced).
  void pump(double run_t, int timeout_ms);
  // unpaced: every detector has read every record pushed (or is done with its input).
  bool drained() const;
  // A stop (FeedOptions::interrupted) has ended every detector.
  bool stopped() const;
  // End of the stream: releases what is held, writes it, closes every stdin, waits (at most exit_s)
  // for every detector to exit, and returns one outcome per detector, in the order given.
  std::vector<ExternalOutcome> finish(double run_t);
  size_t size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A whole recorded stream through the detectors: unpaced (lock-step), or paced at `speed` x recorded
// time. Returns one outcome per detector.
std::vector<ExternalOutcome> feed_recorded(const std::vector<Record>& records,
                                           const std::vector<ExternalDetectorSpec>& detectors, FeedOptions o,
                                           double speed = 1.0);

}  // namespace flatline
