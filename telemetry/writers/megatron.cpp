// Megatron-LM's training log (megatron/training/training.py, training_log(): printed by the last
// pipeline rank every log_interval iterations, the timestamp prefix of recent versions), to train.log:
//   [2026-11-29 10:00:00] iteration      100/     240 | consumed samples:         3200 | elapsed time per
//   iteration (ms): 6.5 | learning rate: 3.000000E-03 | global batch size:    32 | lm loss: 2.345678E+00 |
//   loss scale: 1.0 | grad norm: 1.234 | params norm: 210.300 | number of skipped iterations:   0 |
//   number of nan iterations:   0 |
// (one line). lm loss is the mean over the interval's applied iterations (omitted when every one was
// skipped, as Megatron omits it), elapsed time the interval's mean step time, consumed samples the
// global count (samples per rank x world size), skipped iterations those of the interval.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

class MegatronWriter : public FormatWriter {
 public:
  explicit MegatronWriter(const FormatContext& c) : c_(c), path_(writers::log_file(c, "megatron", "train.log")) {}

  void write(const Record& r) override {
    if (r.kind != RecordKind::step) return;
    loss_.add(r);
    if (r.skipped.value_or(false)) ++skipped_;
    if (r.overflow.value_or(false) && r.loss && !std::isfinite(*r.loss)) ++nan_;
    if (r.step_ms) ms_ += *r.step_ms, ++n_ms_;
    if (r.step % c_.every != 0) return;
    std::string s = fmt::format(" [{}] iteration {:8d}/{:8d} |", writers::utc_time(c_.wall_t0 + r.t, false), r.step,
                                c_.train_iters);
    if (r.samples_seen) s += fmt::format(" consumed samples: {:12d} |", *r.samples_seen * c_.world_size);
    if (n_ms_) s += fmt::format(" elapsed time per iteration (ms): {:.1f} |", ms_ / n_ms_);
    if (r.lr) s += fmt::format(" learning rate: {:.6E} |", *r.lr);
    s += fmt::format(" global batch size: {:5d} |", c_.global_batch);
    if (auto l = loss_.take()) s += fmt::format(" lm loss: {:.6E} |", *l);
    if (r.loss_scale) s += fmt::format(" loss scale: {:.1f} |", *r.loss_scale);
    if (r.grad_norm && !r.skipped.value_or(false)) s += fmt::format(" grad norm: {:.3f} |", *r.grad_norm);
    if (r.param_norm) s += fmt::format(" params norm: {:.3f} |", *r.param_norm);
    s += fmt::format(" number of skipped iterations: {:3d} | number of nan iterations: {:3d} |", skipped_, nan_);
    writers::append_line(path_, s);
    skipped_ = nan_ = n_ms_ = 0;
    ms_ = 0;
  }

 private:
  FormatContext c_;
  std::string path_;
  writers::IntervalLoss loss_;
  int skipped_ = 0, nan_ = 0, n_ms_ = 0;
  double ms_ = 0;
};

}  // namespace

std::unique_ptr<FormatWriter> make_megatron_writer(const FormatContext& c) { return std::make_unique<MegatronWriter>(c); }

}  // namespace flatline
