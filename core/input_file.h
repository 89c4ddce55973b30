// Opening a file flatline did not write: a recorded run, a corpus someone zipped, a log from an issue,
// a scenario (docs/DESIGN.md §9 "Untrusted input"). Every such file is opened here, and only a plain
// regular file within its size limit gets through:
//  - a symbolic link is refused (O_NOFOLLOW): a rank file that links to /etc/passwd, or out of the
//    corpus, is never read;
//  - a FIFO, a device, a socket or a directory is refused, and opening one never blocks (O_NONBLOCK for
//    the open; a FIFO without a writer would otherwise block the open forever, deaf to SIGTERM);
//  - a file of /proc or /sys is refused (they claim to be regular files of size 0, and /proc/kmsg
//    blocks on read);
//  - a file larger than the caller's limit is refused before a byte of it is read, and so is a large
//    file that is mostly holes (a sparse file: gigabytes of zeros from a few blocks on disk).
// Errors are InputError: "PATH: <what>: <why>", naming the file and the limit.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace flatline {

// A file that cannot be taken as input. Its message names the file and what was expected.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits on files read whole (the JSONL and log readers stream, and bound their lines instead).
constexpr uint64_t kMaxSmallFileBytes = 64ull << 20;  // manifest.json, diagnosis.json, scenario.yaml, answers
constexpr uint64_t kMaxCorpusFileBytes = 256ull << 20;  // corpus.json (16k ranks x runs x file hashes)
constexpr uint64_t kMaxLogFileBytes = 16ull << 30;      // a log or telemetry file (streamed)
constexpr uint64_t kMaxWholeFileBytes = 4ull << 30;     // a log file a reader parses whole (held in memory)

inline std::string human_bytes(uint64_t n) {
  const char* unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(n);
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

// Opens `path` read-only under the rules above; returns the descriptor (O_CLOEXEC, blocking reads).
// `what` names the file's role in the error ("the manifest", "a telemetry file").
// A path the user named on the command line may be a link (`follow_link`): only what a file names
// (a run's rank files, a corpus's runs) may not.
inline int open_input(const std::string& path, uint64_t max_bytes, const std::string& what = "input file",
                      bool follow_link = false) {
  auto fail = [&](const std::string& why, int fd = -1) -> int {
    if (fd >= 0) ::close(fd);
    throw InputError(path + ": " + what + ": " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (follow_link ? 0 : O_NOFOLLOW) | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    struct stat l {};
    if (!follow_link && (err == ELOOP || (::lstat(path.c_str(), &l) == 0 && S_ISLNK(l.st_mode))))
      return fail("is a symbolic link; only a regular file is read (links are not followed)");
    return fail(std::string("cannot open: ") + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(std::string("cannot stat: ") + std::strerror(errno), fd);
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return fail(std::string("is ") + kind + "; only a regular file is read", fd);
  }
  struct statfs fs {};
  constexpr long kProcMagic = 0x9fa0, kSysfsMagic = 0x62656572;
  if (::fstatfs(fd, &fs) == 0 && (fs.f_type == kProcMagic || fs.f_type == kSysfsMagic))
    return fail("is a file of /proc or /sys, not a recorded file", fd);
  // Mostly holes: what a real log never is, and what reads as gigabytes of zeros from a few blocks.
  const uint64_t size = static_cast<uint64_t>(st.st_size), on_disk = static_cast<uint64_t>(st.st_blocks) * 512;
  if (size > (64ull << 20) && on_disk < size / 64)
    return fail("is sparse (" + human_bytes(on_disk) + " on disk for " + human_bytes(size) +
                    "): mostly holes, not a recorded file",
                fd);
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return fail("is " + human_bytes(static_cast<uint64_t>(st.st_size)) + ", more than the " + human_bytes(max_bytes) +
                    " this input may have",
                fd);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return fail(std::string("cannot set blocking reads: ") + std::strerror(errno), fd);
  return fd;
}

// The same as a stdio stream ("rb").
inline std::FILE* fopen_input(const std::string& path, uint64_t max_bytes, const std::string& what = "input file") {
  const int fd = open_input(path, max_bytes, what);
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw InputError(path + ": " + what + ": cannot open: " + std::strerror(err));
  }
  return f;
}

// The whole file, at most `max_bytes` (checked before reading, and again while reading: a file that
// grows past the limit is cut off with an error, never read into memory without bound).
inline std::string read_input_file(const std::string& path, uint64_t max_bytes, const std::string& what = "input file",
                                   bool follow_link = false) {
  const int fd = open_input(path, max_bytes, what, follow_link);
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw InputError(path + ": " + what + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      throw InputError(path + ": " + what + ": grew past the " + human_bytes(max_bytes) + " this input may have");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace flatline
