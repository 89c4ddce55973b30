#include "cli/run_dir.h"

#include "core/protocol.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "telemetry/manifest.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {
// Everything a run (cli/launch.cpp, the ranks, `simulate --out`) writes at a run directory's top level:
// detectors/ holds external detectors' stderr (external/feed.h), formats/ the foreign-format logs
// (telemetry/writers/writer.h), confirm/ a confirmation's replays (confirm/confirm.h), trainer/ an
// external trainer's own outputs (kTrainerDirName, core/protocol.h).
const std::set<std::string>& run_entries() {
  static const std::set<std::string> s = {"scenario.yaml", "plan.json", "plan.json.tmp", "manifest.json",      "manifest.json.tmp",
                                          "diagnosis.json",     "diagnosis.json.tmp", "telemetry",
                                          "logs",               "checkpoints",        "telemetry_warnings.txt",
                                          "detectors",          "formats",            "confirm",
                                          kTrainerDirName,      kRunDirLockFile};
  return s;
}
}  // namespace

RunDirLock& RunDirLock::operator=(RunDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) close(fd_);  // the ranks' inherited copies keep it locked until they exit too
}

std::string not_a_run_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return "";
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return "it is not a directory";
  bool any = false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    any = true;
    const std::string name = e.path().filename().string();
    if (!run_entries().count(name)) return fmt::format("it holds '{}', which no flatline run writes", name);
  }
  if (ec) return "cannot list it: " + ec.message();
  if (!any) return "";
  const std::string manifest = dir + "/manifest.json";
  if (fs::exists(manifest, ec)) {
    try {
      const Manifest m = read_manifest(manifest);
      if (m.versions.rfind("flatline", 0) != 0)
        return fmt::format("its manifest.json does not come from flatline (versions '{}')", m.versions);
      return "";
    } catch (const std::exception& e) {
      return fmt::format("its manifest.json is not a flatline manifest ({})", e.what());
    }
  }
  std::ifstream lock(dir + "/" + kRunDirLockFile);
  std::string first;
  std::getline(lock, first);
  if (first.rfind("flatline run lock", 0) == 0) return "";
  return "it has no manifest.json and no flatline lock file";
}

namespace {
// Takes the lock on `path` (created when `create`); -1 when the file does not exist and !create.
// Throws when another process holds it, naming that process.
int take_lock(const std::string& dir, const std::string& path, bool create) {
  // No O_CLOEXEC: the ranks the launcher starts inherit the lock, so it is held while any of them lives.
  const int fd = open(path.c_str(), O_RDWR | (create ? O_CREAT : 0), 0644);
  if (fd < 0 && !create && errno == ENOENT) return -1;
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot open the lock file: {}", path, std::strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
  const int err = errno;
  std::ifstream in(path);
  std::string line, holder;
  while (std::getline(in, line))
    if (line.rfind("pid ", 0) == 0) holder = line.substr(4);
  close(fd);
  if (err == EWOULDBLOCK)
    throw std::runtime_error(fmt::format("{}: in use by another flatline run{} (it holds {}); wait for it to end or "
                                         "choose another --out",
                                         dir, holder.empty() ? "" : " (pid " + holder + ")", path));
  throw std::runtime_error(fmt::format("{}: cannot lock: {}", path, std::strerror(err)));
}

// The lock file's text: what not_a_run_dir recognises, and the pid a refused second run is told.
void write_holder(const RunDirLock& lock, const std::string& path) {
  const std::string text = fmt::format("flatline run lock\npid {}\n", getpid());
  if (ftruncate(lock.fd(), 0) != 0 || pwrite(lock.fd(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw std::runtime_error(fmt::format("{}: cannot write the lock file: {}", path, std::strerror(errno)));
}
}  // namespace

RunDirLock claim_run_dir(const std::string& dir) {
  const std::string path = dir + "/" + kRunDirLockFile;
  std::error_code ec;
  // A run in progress first: whatever its directory holds at this moment, it is not ours to judge.
  RunDirLock lock(fs::is_directory(dir, ec) ? take_lock(dir, path, false) : -1);
  if (const std::string why = not_a_run_dir(dir); !why.empty())
    throw std::runtime_error(fmt::format("{}: is not a flatline run directory ({}); refusing to replace it: choose "
                                         "another --out or scenario name",
                                         dir, why));
  fs::create_directories(dir);
  if (!lock.held()) lock = RunDirLock(take_lock(dir, path, true));
  write_holder(lock, path);
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename() != kRunDirLockFile) fs::remove_all(e.path());
  return lock;
}

RunDirLock lock_prepared_run_dir(const std::string& dir) {
  fs::create_directories(dir);
  const std::string path = dir + "/" + kRunDirLockFile;
  RunDirLock lock(take_lock(dir, path, true));
  write_holder(lock, path);
  return lock;
}

}  // namespace flatline
