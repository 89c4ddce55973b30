#include "sim/watchdog.h"

#include <utility>

namespace flatline {

Watchdog::Watchdog(AsyncRecordWriter& w, const Clock& clock, int rank, double every_s, bool enabled)
    : w_(w), clock_(clock), rank_(rank), every_(every_s) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// The first heartbeat at once: a run shorter than one interval still shows its rank alive.
void Watchdog::loop() {
  std::unique_lock<std::mutex> l(mu_);
  do {
    Record r;
    r.kind = RecordKind::heartbeat;
    r.rank = rank_;
    r.t = clock_.t();
    r.step = step_;
    r.phase = phase_.load();
    try {
      w_.post(std::move(r));  // through the step records' queue: the file keeps the order of t
    } catch (...) {  // a full disk must not kill training from a side thread
    }
  } while (!cv_.wait_for(l, std::chrono::duration<double>(every_), [this] { return stop_; }));
}

}  // namespace flatline
