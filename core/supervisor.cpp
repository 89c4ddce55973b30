// Starting, reading, reaping and ending flatline's child processes (core/supervisor.h).
#include "core/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "core/kept_process.h"
#include "core/protocol.h"

extern char** environ;

namespace flatline {

std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& set,
                                           const std::vector<std::string>& drop) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    const bool replaced = std::any_of(set.begin(), set.end(), [&](const auto& v) { return v.first == key; }) ||
                          std::find(drop.begin(), drop.end(), key) != drop.end();
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
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

std::string describe_exit(int st) {
  if (WIFEXITED(st)) {
    const int c = WEXITSTATUS(st);
    return c == kExitExecFailed ? "exited with status 127 (command not found?)" : fmt::format("exited with status {}", c);
  }
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return "ended";
}

void OutputKeeper::take(const char* data, size_t n) {
  if (file >= 0) {
    const size_t room = kept < file_limit ? file_limit - kept : 0;
    const size_t want = std::min(room, n);
    for (size_t off = 0; off < want;) {
      const ssize_t w = ::write(file, data + off, want - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        file_error = std::strerror(w < 0 ? errno : EIO);
        close_file();
        break;
      }
      off += static_cast<size_t>(w);
      kept += static_cast<size_t>(w);
    }
    dropped += n - want;
  }
  tail.append(data, n);
  if (tail.size() > 2 * tail_limit) tail.erase(0, tail.size() - tail_limit);
}

void OutputKeeper::close_file() {
  if (file >= 0) ::close(file);
  file = -1;
}

void Child::close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

namespace {
void non_blocking(int fd) {
  if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
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

bool asleep(pid_t pid, int depth) {
  const char st = proc_state(pid);
  if (st == 0 || st == 'Z') return true;
  if (st != 'S') return false;
  if (depth > 8) return true;
  std::istringstream kids(proc_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t k; kids >> k;)
    if (!asleep(k, depth + 1)) return false;
  return true;
}

}  // namespace

Child::Child(const ChildSpec& spec) : group_(spec.group) {
  std::vector<const char*> argv;
  for (const auto& w : spec.argv) argv.push_back(w.c_str());
  argv.push_back(nullptr);
  std::vector<const char*> envp;
  for (const auto& e : spec.env) envp.push_back(e.c_str());
  envp.push_back(nullptr);
  auto fail = [&](const char* call) {
    throw std::runtime_error(fmt::format("{}: {} failed: {}", spec.what, call, std::strerror(errno)));
  };
  if (spec.argv.empty()) throw std::invalid_argument(spec.what + ": nothing to run");

  if (group_ == ChildGroup::kept) {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC)) fail("pipe");
    pid_ = spawn_kept(argv[0], const_cast<char* const*>(argv.data()), const_cast<char* const*>(envp.data()), in[0],
                      out[1], err[1]);
    const int spawn_errno = errno;
    for (int fd : {in[0], out[1], err[1]}) ::close(fd);
    if (pid_ < 0) {
      for (int fd : {in[1], out[0], err[0]}) ::close(fd);
      errno = spawn_errno;
      fail("fork");
    }
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  } else {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) fail("pipe");
    const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
    const std::string failure = spec.exec_failure + "\n";
    const std::string no_cwd = fmt::format("flatline: {}: cannot enter {}\n", spec.what, spec.cwd);
    const std::vector<int>& ignored = spec.ignored_signals;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      const int e = errno;
      ::close(fds[0]);
      ::close(fds[1]);
      errno = e;
      fail("fork");
    }
    if (pid_ == 0) {
      // flatline's death (even by SIGKILL) reaches the child as a signal it handles (core/interrupt.h).
      ::prctl(PR_SET_PDEATHSIG, kParentDeathSignal);
      if (::getppid() != parent) ::_exit(kExitSignalBase + kParentDeathSignal);  // it died before the prctl
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : ignored) ::signal(sig, SIG_IGN);
      if (cwd && ::chdir(cwd) != 0) {
        (void)!::write(2, no_cwd.data(), no_cwd.size());
        ::_exit(kExitExecFailed);
      }
      ::execvpe(argv[0], const_cast<char* const*>(argv.data()), const_cast<char* const*>(envp.data()));
      (void)!::write(2, failure.data(), failure.size());
      ::_exit(kExitExecFailed);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }
  for (int fd : {in_, out_, err_}) non_blocking(fd);
}

Child::Child(Child&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      group_(o.group_),
      in_(std::exchange(o.in_, -1)),
      out_(std::exchange(o.out_, -1)),
      err_(std::exchange(o.err_, -1)),
      status_(o.status_),
      wait_status_(o.wait_status_),
      gone_(o.gone_) {}

Child::~Child() {
  if (running()) {
    kill();
    reap(/*block=*/true);
  }
  for (int* fd : {&in_, &out_, &err_}) close_fd(*fd);
}

size_t Child::drain(int& fd, OutputKeeper& keeper) {
  size_t total = 0;
  char buf[65536];
  while (fd >= 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      keeper.take(buf, static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close_fd(fd);  // EOF: the child (and whatever shared the pipe) is gone
  }
  return total;
}

bool Child::reap(bool block) {
  if (!running()) return true;
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  // A kept child's keeper took its tree along; whatever is left in its group too.
  if (kept()) ::kill(-pid_, SIGKILL);
  if (r != pid_) {  // ECHILD: reaped by someone else; its status is not ours to tell
    gone_ = true;
    return true;
  }
  wait_status_ = st;
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : kExitSignalBase + WTERMSIG(st);
  return true;
}

ssize_t Child::write_in(int fd, const char* p, size_t n) {
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

bool Child::asleep() const { return pid_ <= 0 || flatline::asleep(pid_, 0); }

void Child::signal(int sig) {
  if (!running()) return;
  ::kill(kept() ? -pid_ : pid_, sig);
}

void Child::kill() {
  if (!running()) return;
  // A kept child's whole tree, through its keeper: a SIGKILL to the group would leave what left it to init.
  ::kill(pid_, kept() ? kKeeperKillAll() : SIGKILL);
}

}  // namespace flatline
