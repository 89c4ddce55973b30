// Whole-file writes that either land completely or leave the old file as it was: the manifest, the
// diagnosis, checkpoints, `score --json/--junit`. A full disk or an unwritable path is an error naming
// the file and the OS's reason ("No space left on device"), never a silently empty or truncated file.
// How: write PATH.tmp (every byte checked), fsync it (ext4's delayed allocation can report ENOSPC only
// there), close it (checked), then rename(2) it over PATH, which is atomic on POSIX file systems.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flatline {

class FileWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws FileWriteError("PATH: cannot write <what>: <strerror>"); PATH.tmp is removed on failure.
inline void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what = "the file") {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* step, int err, int fd) {
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    throw FileWriteError(path + ": cannot write " + what + " (" + step + "): " + std::strerror(err));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open", errno, -1);
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : EIO, fd);
    off += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 && errno != EINVAL) fail("fsync", errno, fd);  // EINVAL: a file system without fsync
  if (close(fd) != 0) fail("close", errno, -1);
  if (rename(tmp.c_str(), path.c_str()) != 0) fail("rename", errno, -1);
}

// Refuses early an output path that cannot be written (a missing or read-only directory, a directory
// in its place), so that a long suite does not run only to lose its report. Throws FileWriteError.
inline void check_writable_output(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw FileWriteError(path + ": cannot write the file: directory " + dir + ": " + std::strerror(errno));
  if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), W_OK) != 0)
    throw FileWriteError(path + ": cannot write the file: " + std::strerror(errno));
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    throw FileWriteError(path + ": cannot write the file: it is a directory");
  }
}

}  // namespace flatline
