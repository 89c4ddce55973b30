// The format registry, the sink and the helpers the writers share (telemetry/writers/writer.h).
#include "telemetry/writers/writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

namespace flatline {

std::unique_ptr<FormatWriter> make_tensorboard_writer(const FormatContext& c);
std::unique_ptr<FormatWriter> make_hf_writer(const FormatContext& c);
std::unique_ptr<FormatWriter> make_megatron_writer(const FormatContext& c);
std::unique_ptr<FormatWriter> make_deepspeed_writer(const FormatContext& c);
std::unique_ptr<FormatWriter> make_lightning_writer(const FormatContext& c);
std::unique_ptr<FormatWriter> make_wandb_writer(const FormatContext& c);
std::unique_ptr<FormatWriter> make_wandb_run_writer(const FormatContext& c);

namespace {
struct Kind {
  const char* name;
  std::unique_ptr<FormatWriter> (*make)(const FormatContext&);
};
const Kind kKinds[] = {{"tensorboard", make_tensorboard_writer}, {"hf", make_hf_writer},
                       {"megatron", make_megatron_writer},       {"deepspeed", make_deepspeed_writer},
                       {"lightning", make_lightning_writer},     {"wandb", make_wandb_writer},
                       {"wandb-run", make_wandb_run_writer}};
}  // namespace

const std::vector<std::string>& format_kinds() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> v;
    for (const auto& x : kKinds) v.push_back(x.name);
    return v;
  }();
  return k;
}

bool is_format_name(const std::string& s) {
  for (const auto& x : kKinds)
    if (s == x.name) return true;
  return false;
}

std::string format_names() {
  std::string s;
  for (const auto& x : kKinds) s += (s.empty() ? "" : "|") + std::string(x.name);
  return s;
}

std::unique_ptr<FormatWriter> make_format_writer(const std::string& format, const FormatContext& c) {
  for (const auto& x : kKinds)
    if (format == x.name) return x.make(c);
  throw std::invalid_argument("unknown log format '" + format + "' (expected " + format_names() + ")");
}

FormatContext format_context(const Scenario& s, const std::string& run_dir, double run_t0, bool resume) {
  FormatContext c;
  c.run_dir = run_dir;
  c.every = s.formats_every;
  c.world_size = s.world_size;
  c.global_batch = int64_t{s.batch_size} * s.grad_accum * s.world_size;
  c.train_iters = s.steps;
  c.optimizer = s.optimizer.kind;
  c.beta1 = s.optimizer.beta1;
  c.beta2 = s.optimizer.beta2;
  c.wall_t0 = run_t0 > 0 ? run_t0
                         : std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  c.resume = resume;
  return c;
}

std::string format_dir(const std::string& run_dir, const std::string& format) { return run_dir + "/formats/" + format; }

std::vector<std::pair<std::string, std::string>> format_env(const std::string& run_dir,
                                                            const std::vector<std::string>& formats) {
  std::vector<std::pair<std::string, std::string>> env;
  std::string list;
  for (const auto& f : formats) {
    list += (list.empty() ? "" : ",") + f;
    std::string key = "FLATLINE_LOG_";
    for (char ch : f) key += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));  // wandb-run: FLATLINE_LOG_WANDB_RUN
    env.emplace_back(key, format_dir(run_dir, f));
  }
  env.emplace_back("FLATLINE_FORMATS", list);
  return env;
}

FormatSink::FormatSink(const std::vector<std::string>& formats, const FormatContext& c) {
  for (const auto& f : formats) writers_.emplace_back(f, make_format_writer(f, c));
}

void FormatSink::write(const Record& r) {
  for (auto& [name, w] : writers_) {
    if (!w) continue;
    try {
      w->write(r);
    } catch (const std::exception& e) {
      errors_.push_back(name + ": " + e.what());
      w.reset();
    }
  }
}

namespace writers {

void IntervalLoss::add(const Record& r) {
  const auto& v = r.loss_avg ? r.loss_avg : r.loss;
  if (v && !r.skipped.value_or(false)) {
    sum_ += *v;
    ++n_;
  }
}

std::optional<double> IntervalLoss::take() {
  if (n_ == 0) return std::nullopt;
  const double m = sum_ / n_;
  sum_ = 0;
  n_ = 0;
  return m;
}

std::string utc_time(double unix_s, bool millis) {
  const auto secs = static_cast<std::time_t>(std::floor(unix_s));
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  if (!millis) return buf;
  return fmt::format("{},{:03d}", buf, static_cast<int>((unix_s - std::floor(unix_s)) * 1000) % 1000);
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  const std::string l = line + "\n";
  const ssize_t n = ::write(fd, l.data(), l.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(l.size())) throw std::runtime_error(path + ": write failed: " + std::strerror(err));
}

std::string log_file(const FormatContext& c, const std::string& format, const std::string& name) {
  const std::string dir = format_dir(c.run_dir, format), path = dir + "/" + name;
  std::filesystem::create_directories(dir);
  if (!c.resume) std::filesystem::remove(path);
  return path;
}

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);  // shortest round trip, as repr()
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace writers
}  // namespace flatline
