// The child processes flatline starts, watches and ends: the ranks of a local run (cli/launch.cpp,
// docs/DESIGN.md §8) and the external detectors (external/feed.cpp, §13). One way to start a child, read
// what it writes, collect its status and stop it, for both.
//
// Two kinds of child, by where its processes live:
//  - ChildGroup::flatlines: in flatline's own process group, with a parent-death signal
//    (kParentDeathSignal: the launcher's death, even by SIGKILL, reaches a rank as a signal it handles,
//    core/interrupt.h). Its stdout and stderr share one pipe (a rank's log). A rank is flatline's own
//    worker (or a trainer it runs): it ends with its process.
//  - ChildGroup::kept: under a keeper (core/kept_process.h): a process group of its own, and every
//    descendant, setsid or not, ends with it and with flatline. Stdin, stdout and stderr are three pipes
//    (a detector's input, alarms and diagnostics). Anyone's program: it may leave descendants behind.
// Every pipe end flatline keeps is non-blocking and close-on-exec. Between fork and exec only
// async-signal-safe calls run (flatline has threads): everything the child needs is prepared before.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace flatline {

enum class ChildGroup { flatlines, kept };

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0]: a path, or (flatlines) a name looked up in PATH
  std::vector<std::string> env;   // the whole environment, "KEY=VALUE" (child_environment)
  std::string cwd;                // "": flatline's own
  ChildGroup group = ChildGroup::flatlines;
  std::string what = "child";     // names it in errors ("rank 3", "detector naive")
  // flatlines: the line it writes on its output when exec of argv[0] fails; it then exits
  // kExitExecFailed (127), as when it cannot enter cwd (a kept child's keeper exits 127, as a shell does).
  std::string exec_failure = "flatline: exec failed";
  // flatlines: signals ignored in the child from before its exec (a signal it counts once it runs, that
  // must not end it before then: core/checkpoint_request.h)
  std::vector<int> ignored_signals;
};

// This process's environment without the variables `drop` names, then `set` (KEY, VALUE) in order.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& set,
                                           const std::vector<std::string>& drop = {});

// The script /bin/sh -c runs for COMMAND: "exec COMMAND" when it is one simple command (no list,
// pipeline, background job or subshell outside quotes, no leading assignment, reserved word or builtin
// that exec cannot replace), so that the program itself is the process flatline feeds and waits for:
// dash, Debian's /bin/sh, forks the last command and waits, holding the pipes (a detector that closes
// its stdin to declare itself a watcher, docs/DETECTORS.md, would not be seen closing it); bash execs it
// itself. COMMAND as written otherwise.
std::string shell_script(const std::string& command);

// What a wait status (Child::wait_status) says: "exited with status 2", "killed by signal 9 (Killed)",
// "exited with status 127 (command not found?)".
std::string describe_exit(int wait_status);

// What a child wrote on one pipe: kept to a file up to `file_limit` bytes (the rest counted), and its
// last `tail_limit` bytes in memory, so an error can quote the child even when the file's disk is full.
struct OutputKeeper {
  int file = -1;                     // owned; -1: none
  size_t file_limit = SIZE_MAX;
  size_t tail_limit = 8192;
  size_t kept = 0, dropped = 0;      // bytes written to the file, and past its limit
  std::string file_error;            // why the file could not be written ("" while it can)
  std::string tail;
  void take(const char* data, size_t n);
  void close_file();
};

class Child {
 public:
  // Starts it; throws std::runtime_error naming spec.what and the system call that failed.
  explicit Child(const ChildSpec& spec);
  ~Child();  // ends it (its whole tree when kept) if it still runs, and waits for it
  Child(Child&& o) noexcept;
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool kept() const { return group_ == ChildGroup::kept; }
  // flatline's ends of its pipes, -1 once closed: stdin (kept only), stdout (flatlines: and stderr),
  // stderr (kept only).
  int& in() { return in_; }
  int& out() { return out_; }
  int& err() { return err_; }
  int in() const { return in_; }
  int out() const { return out_; }
  int err() const { return err_; }
  static void close_fd(int& fd);

  // Reads what is there on `fd` (out() or err()) into `keeper`; at the end of the stream closes it.
  // Returns the bytes read.
  static size_t drain(int& fd, OutputKeeper& keeper);

  // Writes to its stdin (in()) as write(2) does, but a reader that is gone gives EPIPE, never SIGPIPE
  // (which would kill flatline): the signal is blocked around the write and one it raised taken back, so
  // nothing process-wide (a SIG_IGN children would inherit through exec) changes.
  static ssize_t write_in(int fd, const char* data, size_t n);
  // It and its descendants are all asleep (or gone): waiting for input, from /proc/<pid>/stat.
  bool asleep() const;

  // Collects its exit status if it has ended (block: waits until it has); true once it has.
  bool reap(bool block = false);
  bool running() const { return pid_ > 0 && status_ < 0 && !gone_; }
  // The exit code, or kExitSignalBase + N when signal N killed it; -1 while it runs (or when someone else
  // reaped it).
  int status() const { return status_; }
  int wait_status() const { return wait_status_; }  // waitpid's, once reaped

  // Sends `sig` to it: a flatlines child's process, a kept child's process group (its keeper ignores
  // SIGTERM, SIGINT and SIGHUP and waits for the program to exit).
  void signal(int sig);
  // Ends it now: SIGKILL to a flatlines child; a kept child's whole tree, through its keeper.
  void kill();

 private:
  pid_t pid_ = -1;
  ChildGroup group_ = ChildGroup::flatlines;
  int in_ = -1, out_ = -1, err_ = -1;
  int status_ = -1, wait_status_ = 0;
  bool gone_ = false;
};

}  // namespace flatline
