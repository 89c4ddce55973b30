// Megatron-LM training logs (megatron/training/training.py training_log; megatron/training.py before
// core_r0.5): every log_interval iterations the last pipeline rank prints one line of "key: value |"
// fields, e.g. (one line):
//   [2024-01-01 12:00:00] iteration      100/  500000 | consumed samples:        25600 |
//   elapsed time per iteration (ms): 812.3 | learning rate: 3.000000E-04 | global batch size:   256 |
//   lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 1.234 | num zeros: 0.0 |
//   params norm: 210.3 | number of skipped iterations:   0 | number of nan iterations:   0 |
// Variants: before core_r0.8 no timestamp and the lr with 3 decimals ({:.3E}; 2021's
// megatron/training.py also prints "time (ms) | forward-compute: ..." timer lines, ignored); from
// core_r0.8 the "[YYYY-MM-DD hh:mm:ss]" prefix (datetime.now()) and 6 decimals. An interval whose
// iterations were all skipped prints no loss (the average over 0 advanced iterations is not > 0) and,
// when the last one was skipped, no grad norm. bf16 prints "loss scale: 1.0" on every line.
// Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/training.py) adds consumed tokens,
// actual seqlen, samples per second, TFLOPs and, with pipeline parallelism, logs "lm-loss", a grad
// norm of 0 and 0 skipped iterations whatever happened (train_step: "skipped_iter = 0",
// "grad_norm = 0." under args.deepspeed and pipeline parallelism, 2021): the DeepSpeed engine's
// own lines in the same log (deepspeed.cpp) give the true skipped counter and the loss, and a
// Megatron grad norm of exactly 0 is then dropped. "validation loss at iteration N | lm loss value:
// X |" (evaluate_and_print_results) is an eval record; "saving checkpoint at iteration" a
// checkpoint event.
// Mapping, one record per line (readers/text_log.h for how lines of several writers combine):
// step = iteration, lr, loss = "lm loss" (else the first "* loss" key), loss_scale, grad_norm,
// param_norm, samples_seen = consumed samples, step_ms = elapsed per iteration, overflow = skipped
// iterations > 0, skipped = every iteration of the interval skipped, t = the line's timestamp, else
// the clock of the log's last timestamped line plus the running sum of elapsed time per iteration x
// interval. A line with an unreadable field keeps its other fields and warns (file:line); an
// iteration line without a readable iteration number is skipped with a warning.
#include <fmt/format.h>

#include <cmath>

#include "readers/registry.h"
#include "readers/text_log.h"
#include "readers/text_util.h"

namespace flatline {
namespace readers {
namespace {

// "iteration      100/  500000" -> 100
std::optional<int64_t> iteration_of(std::string_view seg) {
  auto p = find(seg, "iteration");
  if (p == std::string_view::npos) return std::nullopt;
  seg.remove_prefix(p + 9);
  auto slash = seg.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto v = parse_integer(seg.substr(0, slash));
  if (!v || *v < 0 || !parse_integer(seg.substr(slash + 1))) return std::nullopt;
  return v;
}

bool is_iteration_line(std::string_view line) {
  if (line.find('|') == std::string_view::npos) return false;  // one memchr rules out most lines
  auto p = find(line, "iteration ");
  return p != std::string_view::npos && line.find('|', p) != std::string_view::npos &&
         line.find('/', p) != std::string_view::npos && find(line, "validation") == std::string_view::npos &&
         (find(line, "learning rate") != std::string_view::npos || find(line, "consumed samples") != std::string_view::npos ||
          find(line, "elapsed time per iteration") != std::string_view::npos);
}

// "validation loss at iteration 1000 | lm loss value: 2.345678E+00 | lm loss PPL: 1.043E+01 |"
bool validation_line(TextLog& log, std::string_view line) {
  auto p = find(line, "validation loss at iteration ");
  if (p == std::string_view::npos) return false;
  std::string_view rest = line.substr(p + 29);
  auto step = parse_integer(rest.substr(0, rest.find_first_of(" |")));
  std::optional<double> v;
  for (std::string_view key : {"lm loss value:", "loss value:"})
    if (!v) v = number_after(line, key);
  if (!step || !v) return true;
  Record e;
  e.kind = RecordKind::eval;
  e.eval_loss = v;
  e.t = log.t();
  log.event(std::move(e));
  return true;
}

}  // namespace

bool megatron_line(TextLog& log, std::string_view line) {
  if (line.find('|') == std::string_view::npos) return false;  // every Megatron line has fields
  if (!is_iteration_line(line)) return validation_line(log, line);
  Warnings* w = log.warnings();
  const std::string& where = log.where();
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
      auto v = parse_number(val);
      if (!v && w) w->push_back(fmt::format("{}: field '{}': expected a number, got '{}'", where, key, val));
      return v;
    };
    auto whole = [&]() -> std::optional<int64_t> {
      auto v = num();
      if (v && std::isfinite(*v) && std::fabs(*v) < 9e15) return static_cast<int64_t>(*v);
      return std::nullopt;
    };
    if (key == "learning rate") r.lr = num();
    else if (key == "lm loss") r.loss = num();
    else if (key == "loss scale") r.loss_scale = num();
    else if (key == "grad norm") r.grad_norm = num();
    else if (key == "params norm") r.param_norm = num();
    else if (key == "elapsed time per iteration (ms)") r.step_ms = num();
    else if (key == "consumed samples") r.samples_seen = whole();
    else if (key == "number of skipped iterations") nskipped = whole();
    else if (!fallback_loss && key.size() > 5 &&
             (key.substr(key.size() - 5) == " loss" || key.substr(key.size() - 5) == "-loss" || key == "loss"))
      fallback_loss = num();
  }
  if (!iter) {
    if (w) w->push_back(where + ": Megatron line without a readable 'iteration N/ M', skipped");
    return true;
  }
  r.step = *iter;
  if (!r.loss) r.loss = fallback_loss;
  if (log.saw(Source::ds_progress) && r.grad_norm && *r.grad_norm == 0) r.grad_norm.reset();  // a placeholder
  const int64_t prev = log.last_of(Source::megatron);
  const int64_t interval = *iter > prev ? *iter - prev : 1;
  if (r.step_ms && std::isfinite(*r.step_ms) && *r.step_ms >= 0 && *iter > prev)
    log.elapsed(*r.step_ms * 1e-3 * static_cast<double>(interval));
  r.t = std::isfinite(log.t()) ? log.t() : log.elapsed_clock();
  log.report(Source::megatron, std::move(r), nskipped);
  return true;
}

bool has_megatron_lines(std::string_view head) {
  size_t pos = 0;
  while (pos < head.size()) {
    size_t nl = head.find('\n', pos);
    std::string_view l = head.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (is_iteration_line(l)) {
      std::string_view seg = l.substr(find(l, "iteration "));
      if (iteration_of(seg.substr(0, seg.find('|'))).has_value()) return true;
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return false;
}

}  // namespace readers

namespace {

// The run is planned to end at train_iters: "iteration N/ TOTAL" of the first iteration line.
LogFacts facts(std::string_view data) {
  LogFacts f;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    std::string_view l = data.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (readers::is_iteration_line(l)) {
      std::string_view seg = l.substr(readers::find(l, "iteration "));
      seg = seg.substr(0, seg.find('|'));
      const auto slash = seg.find('/');
      if (auto total = slash == std::string_view::npos ? std::nullopt : readers::parse_integer(seg.substr(slash + 1));
          total && *total > 0)
        f.planned_steps = *total;
      return f;
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return f;
}

// Iteration lines: certain. Megatron's start-up banner without an iteration line yet: likely.
Sniff sniff(std::string_view head) {
  if (readers::has_megatron_lines(head)) return Sniff::sure;
  if (readers::find(head, "------------------------ arguments ------------------------") != std::string_view::npos ||
      readers::find(head, "> building GPT model") != std::string_view::npos ||
      (readers::find(head, "using world size:") != std::string_view::npos &&
       readers::find(head, "tensor-model-parallel size") != std::string_view::npos))
    return Sniff::likely;
  return Sniff::no;
}

ReaderDef def() {
  ReaderDef d;
  d.name = "megatron";
  d.summary = "Megatron-LM / Megatron-DeepSpeed training log (training_log lines)";
  d.name_hints = {"*.log", "*.txt", "*.out"};
  d.sniff = sniff;
  d.parse = readers::parse_text_log;
  d.facts = facts;
  d.lines = readers::text_lines;
  d.priority = 30;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
