// A rank's run clock and its watchdog thread (torch-free; docs/DESIGN.md §3 heartbeats, §8 the
// launcher's progress watchdog that reads them). The watchdog writes a heartbeat record at start and
// every `heartbeat_s` with the step and phase the training thread last set, whatever training does: a
// rank blocked in a collective, a data read or a hang still shows alive and says where it is.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "telemetry/async_writer.h"

namespace flatline {

// Run time: seconds since the run's start (`offset` + the time since construction), steady within
// this process.
class Clock {
 public:
  explicit Clock(double offset) : offset_(offset), start_(std::chrono::steady_clock::now()) {}
  double t() const {
    return offset_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void set_offset(double o) { offset_ = o; }

 private:
  double offset_;
  std::chrono::steady_clock::time_point start_;
};

// Heartbeats go through the step records' queue `w`, so the file keeps the order of t. A failed
// write (a full disk) is dropped on this side thread: the training thread's next post reports it.
// Phases are string literals (the pointer is kept): "data", "compute", "collective", "optimizer",
// "eval", "checkpoint". `enabled` false: no thread, no heartbeats (a rank without telemetry).
class Watchdog {
 public:
  Watchdog(AsyncRecordWriter& w, const Clock& clock, int rank, double every_s, bool enabled = true);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void set(int64_t step, const char* phase) {
    step_ = step;
    phase_ = phase;
  }
  void set_phase(const char* phase) { phase_ = phase; }
  int64_t step() const { return step_; }

 private:
  void loop();
  AsyncRecordWriter& w_;
  const Clock& clock_;
  int rank_;
  double every_;
  std::atomic<int64_t> step_{0};
  std::atomic<const char*> phase_{"data"};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace flatline
