// DeepSpeed logs (deepspeed/runtime/engine.py _report_progress; runtime/fp16/loss_scaler.py
// DynamicLossScaler.update_scale; runtime/fp16/fused_optimizer.py and unfused_optimizer.py step and
// _update_scale; runtime/pipe/engine.py train_batch), mixed with any other lines:
//   [2024-01-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=3, lr=[0.0003], mom=[(0.9, 0.999)]
//   rank:0 step=100, skipped=3, lr=[0.0003], mom=[[0.9, 0.999]]          (deepspeed_light.py, 2020)
//   [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768
//   [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768   (v0.2 ZeRO)
//   [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1
//   [deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: 1024.0, reducing to 512.0
//   Grad overflow on iteration 57 / Reducing dynamic loss scale from 1024.0 to 512.0 /
//     Overflow detected. Skipping step. Attempted loss scale: 1024.0, reducing to 512.0   (one overflow)
//   Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.
//   steps: 100 loss: 2.3456 iter time (s): 0.412 samples/sec: 155.3          (pipeline engine)
// Every variant may carry pdsh's "worker-0: " prefix (readers/text_log.h strips it). lr is printed
// per parameter group (the first is read); a scale "reducing to" the same value is a scaler at its
// minimum (min_loss_scale, default 1; 0 is allowed and then prints 0); the hysteresis form skips the
// step without changing the scale. "step=S" is printed every steps_per_print steps (S counts
// skipped steps too; step=0 at engine start-up is the counters' origin, not a step); an overflow line
// is one skipped step, printed before the step line of its interval. Steps are rebuilt per interval
// (readers/text_log.h): one applied record and one skipped record per overflow (loss_scale = the
// attempted scale); with more overflow lines than the rise of the cumulative "skipped=" count (the fused
// optimizer's lines are printed by every rank, log_dist's only by rank 0), the copies are read once. The
// step record of a progress line carries opt_step = step - skipped (the updates the optimizer applied;
// both counters are the engine's global_steps and skipped_steps, restored from a checkpoint on resume):
// without overflow lines that count is all the log says of its skipped steps, and no skipped records are
// made up. The minimum-scale error is one more skipped step plus an `error` event. The loss comes from the pipeline engine's line or the user's own prints.
#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "readers/registry.h"
#include "readers/text_log.h"
#include "readers/text_util.h"

namespace flatline {
namespace readers {
namespace {

bool has(std::string_view s, std::string_view x) { return contains(s, x); }

bool has_nocase(std::string_view s, std::string_view x) {
  if (x.size() > s.size()) return false;
  for (size_t i = 0; i + x.size() <= s.size(); ++i) {
    size_t j = 0;
    while (j < x.size() && std::tolower(static_cast<unsigned char>(s[i + j])) == x[j]) ++j;
    if (j == x.size()) return true;
  }
  return false;
}

bool overflow_line(TextLog& log, std::string_view line) {
  // Every form names the overflow or the loss scale: one search rules out the other lines.
  if (!has(line, "verflow") && !has(line, "OVERFLOW") && !has(line, "loss scale")) return false;
  Overflow o;
  o.t = log.t();
  if (has(line, "loss scale already at minimum")) {
    o.min_error = true;
    auto p = find(line, "Current loss scale");
    o.text = std::string(trim(line.substr(p == std::string_view::npos ? 0 : p)));
    log.overflow(std::move(o));
    return true;
  }
  if (has(line, "Grad overflow on iteration")) {
    o.stage = 1;
  } else if (has(line, "Reducing dynamic loss scale from")) {
    o.stage = 2;
    o.attempted = number_after(line, "Reducing dynamic loss scale from");
    o.next = number_after(line, " to ");
  } else if (has_nocase(line, "overflow!") || has(line, "Overflow detected")) {
    // DynamicLossScaler's "OVERFLOW! Rank" line stands alone; the optimizers' skip lines end a group.
    o.stage = has(line, "OVERFLOW! Rank") ? 0 : 3;
    o.attempted = number_after(line, "Attempted loss scale:");
    if (has(line, "reducing to")) {
      o.next = number_after(line, "reducing to");
      if (!o.next && log.warnings()) log.warnings()->push_back(log.where() + ": unreadable scale after 'reducing to'");
    } else if (has(line, "hysteresis")) {
      o.next = o.attempted;  // the step is skipped, the scale kept
    }
  } else {
    return false;
  }
  log.overflow(std::move(o));
  return true;
}

}  // namespace

bool deepspeed_line(TextLog& log, std::string_view line) {
  Warnings* w = log.warnings();
  // Progress lines first: most of a DeepSpeed log.
  if (has(line, "step=") && has(line, "skipped=")) {
    auto s = number_after(line, "step=");
    auto k = number_after(line, "skipped=");
    auto lr = number_after(line, "lr=");
    if (!s || !std::isfinite(*s) || *s < 0 || *s > 9e15) {
      if (w) w->push_back(log.where() + ": DeepSpeed progress line without a readable step=, skipped");
      return true;
    }
    if (!lr && has(line, "lr=") && w) w->push_back(log.where() + ": unreadable lr=");
    const bool counted = k && std::isfinite(*k) && *k >= 0 && *k <= *s;
    if (counted) log.skipped_total(static_cast<int64_t>(*k));
    if (*s == 0) return true;  // the engine's start-up report: the counters' origin
    Record r;
    r.step = static_cast<int64_t>(*s);
    if (counted) r.opt_step = static_cast<int64_t>(*s - *k);  // global_steps - skipped_steps: the updates applied
    r.lr = lr;
    r.t = log.t();
    log.report(Source::ds_progress, std::move(r));
    return true;
  }
  if (has(line, "steps: ") && has(line, " loss: ")) {
    auto s = number_after(line, "steps: ");
    auto loss = number_after(line, " loss: ");
    if (!s || !std::isfinite(*s) || *s < 0 || *s > 9e15) return true;
    if (!loss && w) w->push_back(log.where() + ": unreadable loss");
    Record r;
    r.step = static_cast<int64_t>(*s);
    r.loss = loss;
    r.t = log.t();
    log.report(Source::ds_pipe, std::move(r));
    return true;
  }
  return overflow_line(log, line);
}

bool has_deepspeed_lines(std::string_view head) {
  return has(head, "[deepspeed]") || has(head, "[deepscale]") || has(head, "OVERFLOW! Rank") ||
         (has(head, "step=") && has(head, "skipped=") && has(head, "lr=")) ||
         has(head, "loss scale already at minimum") || has(head, "Overflow detected. Skipping step") ||
         has(head, "DeepSpeedEngine configuration");
}

}  // namespace readers

namespace {

// DeepSpeed's own lines: likely (a Megatron-DeepSpeed log has them too; Megatron's reader is sure).
Sniff sniff(std::string_view head) { return readers::has_deepspeed_lines(head) ? Sniff::likely : Sniff::no; }

ReaderDef def() {
  ReaderDef d;
  d.name = "deepspeed";
  d.summary = "DeepSpeed engine and loss-scaler log lines (any launcher, pdsh prefixes included)";
  d.name_hints = {"*.log", "*.txt", "*.out"};
  d.sniff = sniff;
  d.parse = readers::parse_text_log;
  d.lines = readers::text_lines;
  d.priority = 40;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
