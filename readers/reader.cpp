// Format names, detection and read_log (readers/reader.h).
#include "readers/reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "readers/text_util.h"
#include "readers/tfrecord.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {
struct FormatName {
  LogFormat f;
  const char* name;
  ParseFn fn;
};
const FormatName kFormats[] = {
    {LogFormat::auto_detect, "auto", nullptr},
    {LogFormat::flatline, "flatline", parse_flatline_jsonl},
    {LogFormat::hf, "hf", parse_hf_trainer_state},
    {LogFormat::megatron, "megatron", parse_megatron_log},
    {LogFormat::deepspeed, "deepspeed", parse_deepspeed_log},
    {LogFormat::lightning, "lightning", parse_lightning_csv},
    {LogFormat::wandb, "wandb", parse_wandb_csv},
    {LogFormat::tensorboard, "tensorboard", parse_tensorboard_events},
};

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool contains(std::string_view s, std::string_view x) { return s.find(x) != std::string_view::npos; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReadError(path + ": cannot open: " + std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

LogFormat csv_flavour(std::string_view head) {
  std::string_view first = head.substr(0, head.find('\n'));
  if (contains(first, "_step") || contains(first, "_runtime") || contains(first, "_timestamp") ||
      (contains(first, "Step") && contains(first, " - ")))
    return LogFormat::wandb;
  return LogFormat::lightning;
}

// Does `name` look like a file of format f (for picking files out of a directory)?
bool name_fits(const std::string& name, LogFormat f) {
  switch (f) {
    case LogFormat::flatline: return ends_with(name, ".jsonl");
    case LogFormat::hf: return name == "trainer_state.json";
    case LogFormat::lightning: return name == "metrics.csv";
    case LogFormat::wandb: return ends_with(name, ".csv");
    case LogFormat::tensorboard: return contains(name, "tfevents");
    case LogFormat::megatron:
    case LogFormat::deepspeed: return ends_with(name, ".log") || ends_with(name, ".txt") || ends_with(name, ".out");
    case LogFormat::auto_detect: return false;
  }
  return false;
}

}  // namespace

const char* to_string(LogFormat f) {
  for (const auto& x : kFormats)
    if (x.f == f) return x.name;
  return "?";
}

LogFormat parse_log_format(const std::string& s) {
  std::string all;
  for (const auto& x : kFormats) {
    if (s == x.name) return x.f;
    all += all.empty() ? x.name : std::string("|") + x.name;
  }
  throw std::invalid_argument("unknown log format '" + s + "' (expected " + all + ")");
}

ParseFn parser_for(LogFormat f) {
  for (const auto& x : kFormats)
    if (x.f == f) return x.fn;
  return nullptr;
}

LogFormat detect_format(const std::string& path, std::string_view head) {
  const std::string name = fs::path(path).filename().string();
  if (ends_with(name, ".jsonl")) return LogFormat::flatline;
  if (name == "trainer_state.json") return LogFormat::hf;
  if (contains(name, "tfevents")) return LogFormat::tensorboard;
  if (ends_with(name, ".csv")) return csv_flavour(head);
  // By content.
  if (head.size() >= 12) {
    uint32_t stored = 0;
    for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<unsigned char>(head[8 + i]);
    if (readers::mask_crc(readers::crc32c(head.data(), 8)) == stored) return LogFormat::tensorboard;
  }
  std::string_view t = readers::trim(head);
  if (!t.empty() && t.front() == '{') {
    if (contains(head, "\"log_history\"")) return LogFormat::hf;
    if (contains(head, "\"kind\"")) return LogFormat::flatline;
  }
  if (contains(head, " iteration ") && contains(head, "consumed samples")) return LogFormat::megatron;
  if (contains(head, "[deepspeed]") || contains(head, "OVERFLOW! Rank") ||
      (contains(head, "step=") && contains(head, "skipped=") && contains(head, "lr=")) ||
      contains(head, "loss scale already at minimum"))
    return LogFormat::deepspeed;
  std::string_view first = head.substr(0, head.find('\n'));
  if (contains(first, ",") && (contains(first, "step") || contains(first, "Step"))) return csv_flavour(head);
  return LogFormat::auto_detect;
}

std::vector<Record> merge_by_time(const std::vector<std::vector<Record>>& files) {
  struct Key {
    double t;
    size_t file, idx;
  };
  std::vector<Key> keys;
  for (size_t f = 0; f < files.size(); ++f) {
    double last = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < files[f].size(); ++i) {
      if (std::isfinite(files[f][i].t)) last = files[f][i].t;
      keys.push_back({last, f, i});
    }
  }
  std::stable_sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.t < b.t; });
  std::vector<Record> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(files[k.file][k.idx]);
  return out;
}

LogData read_log(const std::string& path, LogFormat format) {
  LogData d;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ReadError(path + ": no such file or directory");
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    std::string dir = fs::is_directory(path + "/telemetry", ec) ? path + "/telemetry" : path;
    std::vector<std::string> all;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file(ec)) all.push_back(e.path().string());
    // An HF output dir keeps its state in the newest checkpoint-N/.
    int64_t best = -1;
    std::string best_state;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory(ec) && n.rfind("checkpoint-", 0) == 0 && fs::exists(e.path() / "trainer_state.json", ec)) {
        auto k = readers::parse_integer(n.substr(11));
        if (k && *k > best) best = *k, best_state = (e.path() / "trainer_state.json").string();
      }
    }
    // A Lightning log dir keeps each run in lightning_logs/version_N/ (or version_N/): the newest.
    int64_t best_version = -1;
    std::string best_metrics;
    for (const std::string& parent : {dir, dir + "/lightning_logs"})
      for (const auto& e : fs::directory_iterator(parent, ec)) {
        const std::string n = e.path().filename().string();
        if (!e.is_directory(ec) || n.rfind("version_", 0) != 0 || !fs::exists(e.path() / "metrics.csv", ec)) continue;
        auto k = readers::parse_integer(n.substr(8));
        if (k && *k > best_version) best_version = *k, best_metrics = (e.path() / "metrics.csv").string();
      }
    std::sort(all.begin(), all.end());
    const LogFormat order[] = {LogFormat::flatline, LogFormat::hf, LogFormat::lightning, LogFormat::tensorboard,
                               LogFormat::wandb, LogFormat::megatron};
    for (LogFormat f : order) {
      if (format != LogFormat::auto_detect && format != f &&
          !(format == LogFormat::deepspeed && f == LogFormat::megatron))
        continue;
      for (const auto& p : all)
        if (name_fits(fs::path(p).filename().string(), f)) files.push_back(p);
      if (files.empty() && f == LogFormat::hf && !best_state.empty()) files.push_back(best_state);
      if (files.empty() && f == LogFormat::lightning && !best_metrics.empty()) files.push_back(best_metrics);
      if (!files.empty()) {
        if (format == LogFormat::auto_detect && f != LogFormat::megatron) format = f;
        break;
      }
    }
    if (files.empty()) throw ReadError(path + ": no log found (telemetry/*.jsonl, trainer_state.json, metrics.csv, "
                                              "events.out.tfevents.*, *.csv, *.log)");
  } else {
    files.push_back(path);
  }
  std::vector<std::vector<Record>> per_file;
  std::string last_error;
  for (const auto& f : files) {
    try {
      const std::string data = read_file(f);
      if (data.empty()) throw ReadError(f + ": empty file");
      LogFormat ff = format;
      if (ff == LogFormat::auto_detect) ff = detect_format(f, data);
      if (ff == LogFormat::auto_detect)
        throw ReadError(f + ": unknown log format (force one with --format " +
                        std::string("flatline|hf|megatron|deepspeed|lightning|wandb|tensorboard)"));
      if (d.format == LogFormat::auto_detect) d.format = ff;
      std::vector<Record> recs;
      {
        readers::WarningSink sink(&d.warnings, f);
        recs = parser_for(ff)(data, f, sink.get());
      }
      if (recs.empty()) throw ReadError(f + ": no usable records as " + to_string(ff));
      d.files.push_back(f);
      per_file.push_back(std::move(recs));
    } catch (const ReadError& e) {
      if (files.size() == 1) throw;
      d.warnings.push_back(e.what());
      last_error = e.what();
    }
  }
  if (per_file.empty()) throw ReadError(path + ": nothing usable (" + last_error + ")");
  if (d.format == LogFormat::flatline) {
    int max_rank = -1;
    for (size_t i = 0; i < per_file.size(); ++i) {
      const std::string n = fs::path(d.files[i]).stem().string();
      auto named = n.rfind("rank-", 0) == 0 ? readers::parse_integer(n.substr(5)) : std::nullopt;
      int64_t other = 0, other_rank = -1;
      for (const auto& r : per_file[i]) {
        max_rank = std::max(max_rank, r.rank);
        if (named && r.rank != *named) ++other, other_rank = r.rank;
      }
      if (other)
        d.warnings.push_back(fmt::format("{}: {} record(s) of rank {} in the file of rank {} (kept with the rank they name)",
                                         d.files[i], other, other_rank, *named));
    }
    d.world_size = std::max<int>(static_cast<int>(per_file.size()), max_rank + 1);
    d.records = merge_by_time(per_file);
  } else {
    for (auto& v : per_file) d.records.insert(d.records.end(), v.begin(), v.end());
  }
  return d;
}

}  // namespace flatline
