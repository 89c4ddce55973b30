// How a rank process leaves when it is asked to stop (docs/DESIGN.md §8 "Signals"): SIGTERM, SIGINT or
// SIGHUP (forwarded by the launcher, sent by a shell, a CI runner's timeout, or kParentDeathSignal when
// the launcher died). install_interrupt_handlers() — the worker calls it before it starts anything —
// routes them through a pipe to a thread of their own. That thread runs every registered flush (the
// trainer registers one: an `interrupted` event, then its telemetry drained to disk) and exits with
// kExitSignalBase + the signal. Why a thread: a signal handler may only write(2), and the training
// thread may be blocked anywhere (in a collective, in a read), so nothing that waits for it could end
// the process in bounded time. A flush that hangs (a frozen file system) is ended by the launcher's
// SIGKILL after kInterruptGraceS.
// Processes that never install the handlers (tests that run ranks as threads) keep the default
// dispositions; registering a flush there is harmless.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "core/protocol.h"

namespace flatline {

// "SIGTERM" for 15; "signal N" for others.
inline std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGPIPE: return "SIGPIPE";
    case SIGSTOP: return "SIGSTOP";
    default: return "signal " + std::to_string(sig);
  }
}

// A flush receives the signal and a sentence saying where it came from ("SIGTERM from pid 41",
// "SIGTERM: the launcher (pid 40) died").
using InterruptFlush = std::function<void(int sig, const std::string& why)>;

namespace interrupt_detail {
struct Note {  // what the handler writes to the pipe: one write of < PIPE_BUF bytes is atomic
  int sig;
  pid_t from;
};
struct State {
  std::mutex mu;
  std::list<InterruptFlush> flushes;
  int pipe_wr = -1;
  pid_t parent = 0;
  bool installed = false;
};
inline State& state() {
  static State s;
  return s;
}
inline void on_signal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  Note n{sig, info ? info->si_pid : 0};
  if (state().pipe_wr >= 0) (void)!write(state().pipe_wr, &n, sizeof n);
  errno = saved;
}
[[noreturn]] inline void leave(const Note& n) {
  State& s = state();
  std::string why = signal_name(n.sig);
  if (getppid() != s.parent) why += ": the launcher (pid " + std::to_string(s.parent) + ") died";
  else if (n.from > 0 && n.from == s.parent) why += " from the launcher (pid " + std::to_string(n.from) + ")";
  else if (n.from > 0) why += " from pid " + std::to_string(n.from);
  {
    std::unique_lock<std::mutex> l(s.mu);  // never released: the process ends below
    for (auto& f : s.flushes) {
      try {
        f(n.sig, why);
      } catch (...) {  // a flush that fails (a full disk) must not keep the process alive
      }
    }
    std::fprintf(stderr, "interrupted (%s): telemetry flushed, exiting with status %d\n", why.c_str(),
                 kExitSignalBase + n.sig);
    std::fflush(stderr);
    _exit(kExitSignalBase + n.sig);
  }
}
}  // namespace interrupt_detail

// Idempotent. Installs the handlers for SIGTERM, SIGINT and SIGHUP and ignores SIGPIPE (a launcher
// that died closes the pipe of our stderr; its death arrives as kParentDeathSignal instead).
inline void install_interrupt_handlers() {
  using namespace interrupt_detail;
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.installed) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "warning: cannot create the interrupt pipe (%s): signals end this rank at once\n",
                 std::strerror(errno));
    return;
  }
  s.pipe_wr = fds[1];
  s.parent = getppid();
  std::thread([rd = fds[0]] {
    Note n{};
    for (;;) {
      const ssize_t got = read(rd, &n, sizeof n);
      if (got == static_cast<ssize_t>(sizeof n)) leave(n);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return;
    }
  }).detach();
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  s.installed = true;
}

// Registers a flush for as long as the guard lives (the trainer: while its telemetry writer exists).
class InterruptFlushGuard {
 public:
  explicit InterruptFlushGuard(InterruptFlush f) {
    auto& s = interrupt_detail::state();
    std::lock_guard<std::mutex> l(s.mu);
    it_ = s.flushes.insert(s.flushes.end(), std::move(f));
  }
  ~InterruptFlushGuard() {
    auto& s = interrupt_detail::state();
    std::lock_guard<std::mutex> l(s.mu);
    s.flushes.erase(it_);
  }
  InterruptFlushGuard(const InterruptFlushGuard&) = delete;
  InterruptFlushGuard& operator=(const InterruptFlushGuard&) = delete;

 private:
  std::list<InterruptFlush>::iterator it_;
};

}  // namespace flatline
