// A child process whose whole tree of descendants ends with it, and with flatline (docs/DESIGN.md §13
// "Ending a detector"). An external detector runs as `/bin/sh -c COMMAND`, and what it starts can leave
// its process group (setsid), outlive its shell, or outlive flatline itself (SIGKILL, `timeout -k`).
// So the program is not flatline's child directly: a small keeper process is, and runs it.
//
//   flatline ── keeper (its own process group; a child subreaper; dies-with-parent signal) ── /bin/sh ── ...
//
//  - The keeper is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever its descendants orphan, setsid
//    or not, becomes its child, never init's, so it can always find the whole tree
//    (/proc/self/task/<pid>/children, level by level).
//  - When the program exits, the keeper kills (SIGKILL) every descendant still there, reaps them and
//    exits with the program's status (the same exit code, or the same signal).
//  - kKeeperKillAll (a real-time signal) makes it do that at once, the program included; and it is the
//    keeper's parent-death signal (PR_SET_PDEATHSIG), so flatline's death, even by SIGKILL, ends the
//    tree too.
//  - SIGTERM, SIGINT and SIGHUP sent to the process group reach the program and its group; the keeper
//    itself ignores them and waits for the program to exit (a graceful stop), until kKeeperKillAll.
// Never SIGKILL the keeper's process group while the keeper lives: that would leave the descendants
// that left the group to init. Send kKeeperKillAll, and once the keeper has exited, the group's
// leftovers may be killed.
// Between fork and exec only async-signal-safe system calls run (flatline has threads).
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace flatline {

inline int kKeeperKillAll() { return SIGRTMIN + 2; }

namespace keeper_detail {

// The keeper's children (one level), from /proc/self/task/<pid>/children: up to `cap`; -1 on error.
inline int children(pid_t self, pid_t* out, int cap) {
  char path[64];
  // "/proc/self/task/<pid>/children" without snprintf (not async-signal-safe)
  const char head[] = "/proc/self/task/";
  int n = 0;
  for (const char* p = head; *p; ++p) path[n++] = *p;
  char digits[16];
  int d = 0;
  for (pid_t v = self; v > 0 && d < 15; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d > 0) path[n++] = digits[--d];
  const char tail[] = "/children";
  for (const char* p = tail; *p; ++p) path[n++] = *p;
  path[n] = 0;
  const int fd = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return -1;
  char buf[4096];
  int count = 0;
  long v = -1;
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        v = (v < 0 ? 0 : v * 10) + (buf[i] - '0');
      } else if (v >= 0) {
        if (count < cap) out[count++] = static_cast<pid_t>(v);
        v = -1;
      }
    }
  }
  if (v >= 0 && count < cap) out[count++] = static_cast<pid_t>(v);
  ::close(fd);
  return count;
}

// Kills every descendant: the children, then what they leave behind (reparented to this subreaper),
// until none is left; reaps them all. `main`'s status goes to *main_status if it is reaped here.
inline void kill_tree(pid_t self, pid_t main, int* main_status, bool* main_done) {
  for (int round = 0; round < 10000; ++round) {
    pid_t kids[512];
    const int n = children(self, kids, 512);
    for (int i = 0; i < n; ++i) ::kill(kids[i], SIGKILL);
    bool any = false;
    for (;;) {  // reap what has ended; block only while a killed child is still there
      int st = 0;
      const pid_t w = ::waitpid(-1, &st, n > 0 ? 0 : WNOHANG);
      if (w > 0) {
        any = true;
        if (w == main) *main_status = st, *main_done = true;
        if (n > 0) break;  // one reaped: look at the children again (its own may now be ours)
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      break;
    }
    if (n <= 0 && !any) return;  // no child listed and nothing left to reap
  }
}

[[noreturn]] inline void exit_as(int status) {
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);  // the program dumped its core already, if it did
    ::signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
  ::_exit(1);
}

}  // namespace keeper_detail

// Starts `path argv` (envp) under a keeper with stdin, stdout and stderr on in, out and err; returns
// the keeper's pid (also its process group; -1 and errno on failure). The caller closes its copies of
// in/out/err. What the program exits with, the keeper exits with; kKeeperKillAll() ends the tree.
inline pid_t spawn_kept(const char* path, char* const argv[], char* const envp[], int in, int out, int err) {
  const pid_t parent = ::getpid();
  const int kill_all = kKeeperKillAll();
  const pid_t keeper = ::fork();
  if (keeper != 0) {
    if (keeper > 0) ::setpgid(keeper, keeper);  // both sides: the group exists before either goes on
    return keeper;
  }
  // ---- the keeper ----
  ::setpgid(0, 0);
  sigset_t waited;
  sigemptyset(&waited);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, kill_all}) sigaddset(&waited, s);
  ::sigprocmask(SIG_BLOCK, &waited, nullptr);
  ::prctl(PR_SET_PDEATHSIG, kill_all);
  if (::getppid() != parent) ::_exit(128 + SIGKILL);  // flatline died before the signal was armed
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t main = ::fork();
  if (main == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::syscall(SYS_close_range, 3u, ~0u, 0);
    ::execve(path, argv, envp);
    ::_exit(127);
  }
  // The keeper holds no descriptor: the pipes' ends are the program's and flatline's alone (an end kept
  // here would hide the program's exit from flatline, and its closed stdin from flatline's writes).
  ::syscall(SYS_close_range, 0u, ~0u, 0);
  const pid_t self = ::getpid();
  int status = 0;
  bool done = main < 0;
  if (main < 0) status = 127 << 8;
  for (;;) {
    if (done) {
      keeper_detail::kill_tree(self, main, &status, &done);
      keeper_detail::exit_as(status);
    }
    siginfo_t si;
    const int sig = ::sigwaitinfo(&waited, &si);
    if (sig == SIGCHLD) {
      for (;;) {
        int st = 0;
        const pid_t w = ::waitpid(-1, &st, WNOHANG);
        if (w <= 0) break;
        if (w == main) status = st, done = true;
      }
    } else if (sig == kill_all) {
      keeper_detail::kill_tree(self, main, &status, &done);
      keeper_detail::exit_as(done ? status : SIGKILL);  // SIGKILL as a wait status: killed by it
    }
    // SIGTERM, SIGINT, SIGHUP, SIGQUIT: sent to the group, the program has them too; wait for it.
  }
}

}  // namespace flatline
