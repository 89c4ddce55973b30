// Sinks of the fleet simulator (sinks.h).
#include "sim/simulate/sinks.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "telemetry/jsonl.h"

namespace flatline {

JsonlDirSink::JsonlDirSink(std::string dir) : dir_(std::move(dir)) { std::filesystem::create_directories(dir_); }

JsonlDirSink::~JsonlDirSink() {
  for (auto* f : files_)
    if (f) std::fclose(f);  // end() was not reached: an error is already on its way
}

void JsonlDirSink::write(const Record& r) {
  if (r.rank < 0) return;
  if (static_cast<size_t>(r.rank) >= files_.size()) files_.resize(static_cast<size_t>(r.rank) + 1, nullptr);
  std::FILE*& f = files_[static_cast<size_t>(r.rank)];
  if (!f) {
    const std::string path = fmt::format("{}/rank-{}.jsonl", dir_, r.rank);
    f = std::fopen(path.c_str(), "w");
    if (!f)
      throw std::runtime_error(fmt::format("{}: cannot open for writing: {}{}", path, std::strerror(errno),
                                           errno == EMFILE ? " (one file per rank: raise ulimit -n)" : ""));
    std::setvbuf(f, nullptr, _IOFBF, 1 << 16);
  }
  std::string line = to_json(r);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size())
    throw std::runtime_error(fmt::format("{}/rank-{}.jsonl: cannot write the {} record of step {}: {}", dir_, r.rank,
                                         to_string(r.kind), r.step, std::strerror(errno)));
  bytes_ += static_cast<int64_t>(line.size());
}

void JsonlDirSink::end(double) {
  std::string failed;
  for (size_t r = 0; r < files_.size(); ++r)
    if (std::FILE*& f = files_[r]) {
      // the buffered tail is written here: a full disk shows now or never
      if (std::fclose(f) != 0 && failed.empty())
        failed = fmt::format("{}/rank-{}.jsonl: cannot write its last records: {}", dir_, r, std::strerror(errno));
      f = nullptr;
    }
  if (!failed.empty()) throw std::runtime_error(failed);
}

Manifest simulation_manifest(const Scenario& s, const SimResult& r, double wall_s) {
  Manifest m = scenario_manifest(s, fmt::format("flatline {}; fleet simulator (sim/simulate, no torch)", FLATLINE_VERSION));
  for (size_t i = 0; i < m.faults.size() && i < r.onset_t.size(); ++i) m.faults[i].onset_t = r.onset_t[i];
  m.status = r.failed ? "failed" : "completed";
  m.error = r.error;
  m.wall_s = wall_s;
  return m;
}

}  // namespace flatline
