// TensorBoard event files (events.out.tfevents.*), as written by torch.utils.tensorboard.SummaryWriter,
// tensorboardX, TF and Megatron: TFRecord-framed (telemetry/tfrecord.h) serialized Event protos
// (telemetry/tensorboard.proto, field numbers of tensorboard/compat/proto/event.proto). Scalars come as
// Summary.Value.simple_value (SummaryWriter.add_scalar) or as a rank-0 tensor (TF2 tf.summary.scalar:
// float_val / double_val / int_val / int64_val / half_val or tensor_content). Tags are mapped by
// readers/metric_names.h (train/loss, loss, lr, learning_rate, grad_norm, loss_scale, ...; Megatron's
// "lm loss", "learning-rate", "loss-scale", "grad-norm"). All values of one step become one record
// (t = its earliest wall_time minus the file's first), in step order; an eval tag becomes an eval
// record. A tag repeated at the same step (a restart rewrote it) keeps the first value, with a warning.
// Events that do not parse are skipped with their byte offset. Rank 0.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "readers/metric_names.h"
#include "readers/registry.h"
#include "telemetry/tensorboard.pb.h"
#include "readers/text_util.h"
#include "telemetry/tfrecord.h"

namespace flatline {
namespace {
using readers::at_byte;

double half_to_double(uint32_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1 : 1;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(mant + 1024, exp - 25);
}

std::optional<double> scalar_of(const tb::TensorProto& t) {
  const std::string& c = t.tensor_content();
  switch (t.dtype()) {
    case 1:  // DT_FLOAT
      if (t.float_val_size()) return t.float_val(0);
      if (c.size() == 4) { float f; std::memcpy(&f, c.data(), 4); return f; }
      break;
    case 2:  // DT_DOUBLE
      if (t.double_val_size()) return t.double_val(0);
      if (c.size() == 8) { double d; std::memcpy(&d, c.data(), 8); return d; }
      break;
    case 3:  // DT_INT32
      if (t.int_val_size()) return t.int_val(0);
      if (c.size() == 4) { int32_t i; std::memcpy(&i, c.data(), 4); return i; }
      break;
    case 9:  // DT_INT64
      if (t.int64_val_size()) return static_cast<double>(t.int64_val(0));
      if (c.size() == 8) { int64_t i; std::memcpy(&i, c.data(), 8); return static_cast<double>(i); }
      break;
    case 19:  // DT_HALF
      if (t.half_val_size()) return half_to_double(static_cast<uint32_t>(t.half_val(0)) & 0xffff);
      if (c.size() == 2) return half_to_double(static_cast<unsigned char>(c[0]) | (static_cast<unsigned char>(c[1]) << 8));
      break;
  }
  return std::nullopt;
}

struct StepAcc {
  Record rec;
  bool any = false;
  std::optional<double> eval;
  double t = INFINITY;
};

std::vector<Record> parse(std::string_view data, const std::string& name, Warnings* w) {
  auto recs = split_tfrecords(data, name, w);
  if (recs.empty() && !data.empty()) throw ReadError(at_byte(name, 0) + ": no readable TFRecord (not an event file?)");
  std::map<int64_t, StepAcc> steps;
  std::set<std::pair<int64_t, int>> seen;
  std::optional<double> t0;
  for (const auto& r : recs) {
    tb::Event ev;
    if (!ev.ParseFromArray(r.data.data(), static_cast<int>(r.data.size()))) {
      if (w) w->push_back(at_byte(name, r.offset) + ": record is not an Event proto, skipped");
      continue;
    }
    if (std::isfinite(ev.wall_time()) && ev.wall_time() > 0 && (!t0 || ev.wall_time() < *t0)) t0 = ev.wall_time();
    if (!ev.has_summary()) continue;
    if (ev.step() < 0) {
      if (w) w->push_back(fmt::format("{}: negative step {}, skipped", at_byte(name, r.offset), ev.step()));
      continue;
    }
    for (const auto& v : ev.summary().value()) {
      readers::Metric m = readers::metric_for(v.tag());
      if (m == readers::Metric::none || m == readers::Metric::step) continue;
      std::optional<double> x;
      if (v.value_case() == tb::Summary::Value::kSimpleValue) x = v.simple_value();
      else if (v.value_case() == tb::Summary::Value::kTensor) x = scalar_of(v.tensor());
      if (!x) {
        if (w) w->push_back(fmt::format("{}: tag '{}' is not a scalar, skipped", at_byte(name, r.offset), v.tag()));
        continue;
      }
      if (!seen.insert({ev.step(), static_cast<int>(m)}).second) {
        if (w)
          w->push_back(fmt::format("{}: tag '{}' again at step {} (a restart?), first value kept", at_byte(name, r.offset),
                                   v.tag(), ev.step()));
        continue;
      }
      StepAcc& a = steps[ev.step()];
      a.rec.step = ev.step();
      if (std::isfinite(ev.wall_time())) a.t = std::min(a.t, ev.wall_time());
      if (m == readers::Metric::eval_loss) a.eval = x;
      else a.any |= readers::set_metric(a.rec, m, *x) && m != readers::Metric::epoch;
    }
  }
  std::vector<Record> out;
  for (auto& [step, a] : steps) {
    const double t = std::isfinite(a.t) && t0 ? a.t - *t0 : std::nan("");
    if (a.any) {
      a.rec.t = t;
      out.push_back(a.rec);
    }
    if (a.eval) {
      Record e;
      e.kind = RecordKind::eval;
      e.step = step;
      e.t = t;
      e.eval_loss = a.eval;
      out.push_back(std::move(e));
    }
  }
  return out;
}

// The first record's length CRC holds: a TFRecord file.
Sniff sniff(std::string_view head) {
  if (head.size() < 12) return Sniff::no;
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<unsigned char>(head[8 + i]);
  return mask_crc(crc32c(head.data(), 8)) == stored ? Sniff::sure : Sniff::no;
}

// "events.out.tfevents.<unix time>.<host>..." -> the creation time (0 when not in that form).
double created(const std::string& file_name) {
  const std::string key = "tfevents.";
  auto p = file_name.find(key);
  if (p == std::string::npos) return 0;
  auto v = readers::parse_number(file_name.substr(p + key.size(), file_name.find('.', p + key.size()) - p - key.size()));
  return v && std::isfinite(*v) ? *v : 0;
}

// A log dir holds event files directly or in run subdirectories (HF: runs/<date>_<host>/, Lightning:
// lightning_logs/version_N/), up to 4 levels down. One directory of event files is one run (a
// restart adds a file: read in creation order). Sibling directories named rank<N> / rank_<N> are the
// ranks of one run (a SummaryWriter per rank); otherwise the run whose newest file is the latest.
std::vector<std::string> locate(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::vector<std::string>> by_dir;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() >= 4) it.disable_recursion_pending();
    if (!it->is_regular_file(ec)) continue;
    const std::string n = it->path().filename().string();
    if (n.find("tfevents") != std::string::npos) by_dir[it->path().parent_path().string()].push_back(it->path().string());
  }
  if (by_dir.empty()) return {};
  auto in_order = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
      const double ca = created(fs::path(a).filename().string()), cb = created(fs::path(b).filename().string());
      return ca != cb ? ca < cb : a < b;
    });
    return v;
  };
  bool all_ranks = by_dir.size() > 1;
  for (const auto& [d, files] : by_dir) all_ranks &= rank_from_path(fs::path(d).filename().string()) >= 0;
  if (all_ranks) {
    std::vector<std::string> out;
    for (const auto& [d, files] : by_dir)
      for (auto& f : in_order(files)) out.push_back(f);
    return out;
  }
  const std::vector<std::string>* best = nullptr;
  double best_t = -1;
  for (const auto& [d, files] : by_dir) {
    double t = 0;
    for (const auto& f : files) t = std::max(t, created(fs::path(f).filename().string()));
    if (!best || t > best_t) best = &files, best_t = t;
  }
  return in_order(*best);
}

ReaderDef def() {
  ReaderDef d;
  d.name = "tensorboard";
  d.summary = "TensorBoard event files (SummaryWriter, tensorboardX, TF, Megatron, Lightning, HF)";
  d.name_hints = {"*tfevents*"};
  d.sniff = sniff;
  d.parse = parse;
  d.locate = locate;
  d.priority = 70;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
