// A small disk for the full-disk tests: a tmpfs of a given size mounted on a directory, filled on demand.
// Needs root to mount (CI runs as root); why_not() says why it could not be made, for GTEST_SKIP.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace flatline::e2e {
namespace fs = std::filesystem;

class SmallDisk {
 public:
  SmallDisk(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    if (geteuid() != 0) {
      why_not_ = "needs root to mount a tmpfs; CI runs as root";
    } else if (mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      why_not_ = std::string("cannot mount a tmpfs here: ") + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~SmallDisk() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  const std::string& why_not() const { return why_not_; }
  // Fills the disk but for `leave` bytes (a file of its own, outside any run directory).
  void fill(size_t leave) {
    struct statvfs v {};
    ASSERT_EQ(statvfs(dir_.c_str(), &v), 0);
    const size_t avail = static_cast<size_t>(v.f_bavail) * v.f_bsize;
    const int fd = ::open((dir_ + "/filler").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    std::vector<char> chunk(1 << 16, 'x');
    for (size_t n = 0; n + leave < avail;) {
      const ssize_t w = ::write(fd, chunk.data(), std::min(chunk.size(), avail - leave - n));
      if (w <= 0) break;
      n += static_cast<size_t>(w);
    }
    ::close(fd);
  }
  void unfill() { fs::remove(dir_ + "/filler"); }

 private:
  std::string dir_, why_not_;
  bool mounted_ = false;
};

}  // namespace flatline::e2e
