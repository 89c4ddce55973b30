// A run directory's claim and lock (docs/DESIGN.md §8): what `flatline run`, `flatline score` and
// `flatline simulate --out` may replace, and how two of them are kept out of one directory.
// A new run replaces an old run directory only. "A run directory" is decided by more than a file name:
// every entry must be one that a run writes (scenario.yaml, manifest.json, diagnosis.json,
// telemetry/, logs/, checkpoints/, ...), and manifest.json must read as a flatline manifest, or the
// directory must hold flatline's lock file (a run that died before its first manifest). Anything else
// is refused, naming the entry. The lock is flock(2) on DIR/.lock, held from the claim until the
// launcher and every rank it started have exited (the ranks inherit the descriptor), so a second run
// into the same directory is refused with the first one's pid instead of both destroying each other.
#pragma once
#include <string>

namespace flatline {

class RunDirLock {
 public:
  RunDirLock() = default;
  explicit RunDirLock(int fd) : fd_(fd) {}
  RunDirLock(RunDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunDirLock& operator=(RunDirLock&& o) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();
  bool held() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// The lock file's name inside a run directory.
constexpr const char* kRunDirLockFile = ".lock";

// Why `dir` is not a flatline run directory ("" when it is one, or is empty or absent).
std::string not_a_run_dir(const std::string& dir);

// Claims `dir` for a new run: refuses a directory that is not a run directory and one that another
// run holds (std::runtime_error naming it and why), locks it, and empties it but for the lock file.
RunDirLock claim_run_dir(const std::string& dir);

// Locks `dir` (created if absent) for a run whose caller prepared it: a replay of `flatline confirm`,
// whose directory holds the checkpoint it starts from. Neither judged nor emptied; refused (as above)
// while another run holds it.
RunDirLock lock_prepared_run_dir(const std::string& dir);

}  // namespace flatline
