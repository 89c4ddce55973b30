// Megatron-LM training log (megatron/training/training.py, training_log): every log_interval
// iterations the last pipeline rank prints one line of "key: value |" fields:
//   [2024-01-01 12:00:00] iteration      100/  500000 | consumed samples:        25600 |
//   elapsed time per iteration (ms): 812.3 | learning rate: 3.000000E-04 | global batch size:   256 |
//   lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 1.234 | num zeros: 0.0 |
//   params norm: 210.3 | number of skipped iterations:   0 | number of nan iterations:   0 |
// (one line; the timestamp is absent in older versions). Other lines are ignored. Mapping, one step
// record per line, rank 0: step = iteration, lr, loss = "lm loss" (else the first "* loss" key),
// loss_scale, grad_norm, param_norm, samples_seen = consumed samples, step_ms = elapsed per iteration,
// overflow = skipped iterations > 0, skipped = every iteration of the interval skipped (Megatron then
// omits the loss and the grad norm), t = seconds since the first timestamp, else the running sum of
// elapsed time per iteration x interval. A line with an unreadable field keeps its other fields and
// warns (file:line); an iteration line without a readable iteration number is skipped with a warning.
#include <fmt/format.h>

#include <cmath>

#include "readers/reader.h"
#include "readers/text_util.h"

namespace flatline {
namespace {
using readers::at_line;
using readers::trim;

// "iteration      100/  500000" -> 100
std::optional<int64_t> iteration_of(std::string_view seg) {
  auto p = seg.find("iteration");
  if (p == std::string_view::npos) return std::nullopt;
  seg.remove_prefix(p + 9);
  auto slash = seg.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto v = readers::parse_integer(seg.substr(0, slash));
  if (!v || *v < 0 || !readers::parse_integer(seg.substr(slash + 1))) return std::nullopt;
  return v;
}

}  // namespace

std::vector<Record> parse_megatron_log(std::string_view data, const std::string& name, Warnings* w) {
  std::vector<Record> out;
  readers::StepOrder order;
  std::optional<double> t0;
  double elapsed_sum = 0;
  int64_t prev_iter = -1;
  readers::for_each_line(data, name, w, [&](size_t line_no, std::string_view line) {
    if (line.find(" iteration ") == std::string_view::npos || line.find('|') == std::string_view::npos ||
        line.find("consumed samples") == std::string_view::npos)
      return;
    const std::string where = at_line(name, line_no);
    const auto ts = readers::parse_leading_timestamp(line);
    if (ts && !t0) t0 = ts;
    Record r;
    std::optional<int64_t> iter, nskipped;
    std::optional<double> fallback_loss;
    size_t start = 0;
    while (start <= line.size()) {
      size_t bar = line.find('|', start);
      std::string_view seg = line.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
      start = bar == std::string_view::npos ? line.size() + 1 : bar + 1;
      if (!iter) {
        if ((iter = iteration_of(seg))) continue;
      }
      auto colon = seg.rfind(':');
      if (colon == std::string_view::npos) continue;
      std::string_view key = trim(seg.substr(0, colon)), val = trim(seg.substr(colon + 1));
      auto num = [&]() -> std::optional<double> {
        auto v = readers::parse_number(val);
        if (!v && w) w->push_back(fmt::format("{}: field '{}': expected a number, got '{}'", where, key, val));
        return v;
      };
      if (key == "learning rate") r.lr = num();
      else if (key == "lm loss") r.loss = num();
      else if (key == "loss scale") r.loss_scale = num();
      else if (key == "grad norm") r.grad_norm = num();
      else if (key == "params norm") r.param_norm = num();
      else if (key == "elapsed time per iteration (ms)") r.step_ms = num();
      else if (key == "consumed samples") {
        if (auto v = num(); v && std::isfinite(*v) && std::fabs(*v) < 9e15) r.samples_seen = static_cast<int64_t>(*v);
      } else if (key == "number of skipped iterations") {
        if (auto v = num(); v && std::isfinite(*v) && std::fabs(*v) < 9e15) nskipped = static_cast<int64_t>(*v);
      } else if (key.size() > 5 && key.substr(key.size() - 5) == " loss" && !fallback_loss) {
        fallback_loss = num();
      }
    }
    if (!iter) {
      if (w) w->push_back(where + ": Megatron line without a readable 'iteration N/ M', skipped");
      return;
    }
    r.step = *iter;
    if (!r.loss) r.loss = fallback_loss;
    const int64_t interval = prev_iter >= 0 && *iter > prev_iter ? *iter - prev_iter : (prev_iter < 0 ? *iter : 1);
    if (nskipped) {
      r.overflow = *nskipped > 0;
      r.skipped = *nskipped > 0 && *nskipped >= interval;
    }
    if (ts) {
      r.t = *ts - *t0;
    } else if (!t0) {
      if (r.step_ms && std::isfinite(*r.step_ms) && *r.step_ms >= 0) elapsed_sum += *r.step_ms * 1e-3 * interval;
      r.t = elapsed_sum;
    }
    if (!order.accept(0, r.step, where, w)) return;
    prev_iter = *iter;
    out.push_back(std::move(r));
  });
  return out;
}

}  // namespace flatline
