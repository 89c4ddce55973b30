// Sinks of the fleet simulator (sinks.h).
#include "sim/simulate/sinks.h"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#include "telemetry/jsonl.h"

namespace flatline {

JsonlDirSink::JsonlDirSink(std::string dir) : dir_(std::move(dir)) { std::filesystem::create_directories(dir_); }

JsonlDirSink::~JsonlDirSink() { end(0); }

void JsonlDirSink::write(const Record& r) {
  if (r.rank < 0) return;
  if (static_cast<size_t>(r.rank) >= files_.size()) files_.resize(static_cast<size_t>(r.rank) + 1, nullptr);
  std::FILE*& f = files_[static_cast<size_t>(r.rank)];
  if (!f) {
    const std::string path = fmt::format("{}/rank-{}.jsonl", dir_, r.rank);
    f = std::fopen(path.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + path + " (too many open files? raise ulimit -n)");
    std::setvbuf(f, nullptr, _IOFBF, 1 << 16);
  }
  std::string line = to_json(r);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size()) throw std::runtime_error("write failed in " + dir_);
  bytes_ += static_cast<int64_t>(line.size());
}

void JsonlDirSink::end(double) {
  for (auto*& f : files_)
    if (f) {
      std::fclose(f);
      f = nullptr;
    }
}

Manifest simulation_manifest(const Scenario& s, const SimResult& r, double wall_s) {
  Manifest m;
  m.scenario = s.name;
  m.source = s.source;
  m.resolved_yaml = to_yaml(s);
  m.seed = s.seed;
  m.world_size = s.world_size;
  m.steps = s.steps;
  m.versions = fmt::format("flatline {}; fleet simulator (sim/simulate, no torch)", FLATLINE_VERSION);
  m.expect_cause = s.expect.cause;
  m.expect_rank = s.expect.rank;
  m.expect_within_steps = s.expect.within_steps;
  for (size_t i = 0; i < r.truths.size(); ++i) {
    const FaultTruth& t = r.truths[i];
    m.faults.push_back({t.kind, t.mode, t.rank, t.active_from, t.onset_step, r.onset_t[i]});
  }
  m.status = r.failed ? "failed" : "completed";
  m.error = r.error;
  m.wall_s = wall_s;
  return m;
}

}  // namespace flatline
