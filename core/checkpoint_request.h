// A rank's side of the launcher's request for a checkpoint (core/protocol.h kCheckpointRequestSignal;
// docs/DESIGN.md §8 "A checkpoint near each finding"): the requests are counted, and the trainer reads
// the count at each step boundary (sim/trainer.cpp), where the ranks agree on it.
// How: the signal is blocked in the thread that installs the counter, and so in every thread it starts
// afterwards (the worker installs it first, before any other thread exists), and one thread takes it with
// sigwait(2). So no other thread is ever interrupted by it (no EINTR in Gloo's, LibTorch's or the
// writer's system calls). The launcher starts its own workers with the signal ignored (a disposition
// exec keeps), so a request that arrives before the counter is installed is dropped instead of ending
// the process with the signal's default action.
#pragma once
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

#include "core/protocol.h"

namespace flatline {

namespace checkpoint_request_detail {
static_assert(std::atomic<int64_t>::is_always_lock_free, "counted in a signal handler too");
inline std::atomic<int64_t>& count() {
  static std::atomic<int64_t> n{0};
  return n;
}
inline void on_signal(int) { count().fetch_add(1); }  // async-signal-safe: one lock-free increment
}  // namespace checkpoint_request_detail

// Idempotent: counts kCheckpointRequestSignal from now on. Call it before the process starts any thread;
// a thread started earlier that takes the signal counts it in a handler instead (and may see EINTR).
inline void install_checkpoint_request_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = checkpoint_request_detail::on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(kCheckpointRequestSignal, &sa, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, kCheckpointRequestSignal);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0) checkpoint_request_detail::count().fetch_add(1);
      }
    }).detach();
  });
}

// The requests this process has received so far.
inline int64_t checkpoint_requests() { return checkpoint_request_detail::count().load(); }

// What one request does (a process that runs its ranks as threads, a test).
inline void request_checkpoint() { checkpoint_request_detail::count().fetch_add(1); }

}  // namespace flatline
