#include "cli/local_guard.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sim/data.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {
constexpr double kMiB = 1 << 20, kGiB = 1 << 30;
// Fashion-MNIST decompressed (60,000 + 10,000 images of 28 x 28 bytes and their labels), held once,
// plus the buffer it was read into.
constexpr double kFashionMnistBytes = 2 * (70000.0 * 784 + 70000);

double bytes_at(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<double>(fs::file_size(path, ec));
  double n = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec)) n += static_cast<double>(e.file_size(ec));
  return n;
}

std::string gib(double b) { return b >= kGiB ? fmt::format("{:.1f} GiB", b / kGiB) : fmt::format("{:.0f} MiB", b / kMiB); }
}  // namespace

MachineCapacity this_machine() {
  MachineCapacity m;
  cpu_set_t set;
  CPU_ZERO(&set);
  m.cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (m.cores < 1) m.cores = 1;
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    double kb = 0;
    in >> kb;
    if (key == "MemAvailable:") m.available_bytes = kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return m;
}

double rank_memory_bytes(const Scenario& s) {
  const ModelSpec& md = s.model;
  const double B = s.batch_size;
  double params = 0, act = 0, data = 0;
  if (md.kind == "cnn") {
    const double c = md.channels;
    params = 9 * c + 9 * c * 2 * c + 2 * c * 7 * 7 * md.hidden + md.hidden * 10;
    act = 10 * B * c * 28 * 28;
    data = kFashionMnistBytes;
  } else {
    const double C = md.n_embd, T = md.block_size, H = md.n_head, L = md.n_layer;
    params = 12 * L * C * C + (256 + T) * C + (md.tied_head ? 0 : 256 * C);
    act = L * (16 * B * T * C + 8 * B * H * T * T) + 20 * B * T * 256;
    data = 3 * bytes_at(s.data.path.empty() ? kDefaultTextPath : s.data.path);
  }
  return kRankBaseBytes + data + 5 * 4 * params + 4 * act;
}

std::string local_world_refusal(const Scenario& s, const MachineCapacity& m, bool oversubscribe) {
  const int by_cores = kMaxRanksPerCore * m.cores;
  const double per_rank = rank_memory_bytes(s), budget = kMaxMemoryFraction * m.available_bytes;
  const bool cores_ok = oversubscribe || s.world_size <= by_cores;
  const bool memory_ok = s.world_size * per_rank <= budget;
  if (cores_ok && memory_ok) return "";
  std::string why;
  if (!cores_ok)
    why = fmt::format("{} core{} allow at most {} local ranks ({} per core; --oversubscribe lifts this bound)", m.cores,
                      m.cores == 1 ? "" : "s", by_cores, kMaxRanksPerCore);
  if (!memory_ok)
    why += fmt::format("{}{} ranks x ~{} each (estimated for {} {}x{}, batch {}) = {} exceeds {:.0f}% of the {} "
                       "available (at most {} ranks)",
                       why.empty() ? "" : "; ", s.world_size, gib(per_rank), s.model.kind,
                       s.model.kind == "cnn" ? s.model.channels : s.model.n_layer,
                       s.model.kind == "cnn" ? s.model.hidden : s.model.n_embd, s.batch_size,
                       gib(s.world_size * per_rank), 100 * kMaxMemoryFraction, gib(m.available_bytes),
                       static_cast<int64_t>(budget / per_rank));
  return fmt::format("{}: world_size {} is more than this machine can run as local processes: {}.\n"
                     "  Simulate the fleet instead (no training):  flatline simulate {} --ranks {}\n"
                     "  or run the ranks on several hosts under torchrun --no-python or srun (`flatline worker`, "
                     "README \"Under a launcher\").",
                     s.source, s.world_size, why, s.source, s.world_size);
}

}  // namespace flatline
