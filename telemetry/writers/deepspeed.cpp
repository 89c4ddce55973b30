// DeepSpeed's log, to train.log: the engine's progress line every steps_per_print (= `every`) steps
// (deepspeed/runtime/engine.py, _report_progress, through log_dist on rank 0) and, with fp16, the
// dynamic loss scaler's line for each overflow (deepspeed/runtime/fp16/loss_scaler.py,
// DynamicLossScaler.update_scale), before the progress line of its interval:
//   [2026-11-29 10:00:00,123] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768
//   [2026-11-29 10:00:00,456] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=3, lr=[0.003], mom=[(0.9, 0.95)]
// step= counts every step (skipped ones too), skipped= the cumulative skipped steps; DeepSpeed's engine
// does not log the loss. The scaler's next scale is half the attempted one (backoff 0.5, hysteresis 1).
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

std::string scale_text(double v) {  // the scaler prints an int-valued scale as an int
  return std::floor(v) == v && std::fabs(v) < 1e15 ? fmt::format("{}", static_cast<int64_t>(v)) : writers::python_float(v);
}

class DeepSpeedWriter : public FormatWriter {
 public:
  explicit DeepSpeedWriter(const FormatContext& c) : c_(c), path_(writers::log_file(c, "deepspeed", "train.log")) {}

  void write(const Record& r) override {
    if (r.kind != RecordKind::step) return;
    const std::string ts = writers::utc_time(c_.wall_t0 + r.t, true);
    if (r.skipped.value_or(false)) {
      ++skipped_;
      const double attempted = r.loss_scale.value_or(1);
      writers::append_line(path_, fmt::format("[{}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                                              "Skipping step. Attempted loss scale: {}, reducing to {}",
                                              ts, scale_text(attempted), scale_text(attempted / 2)));
    }
    if (r.step % c_.every != 0) return;
    writers::append_line(path_, fmt::format("[{}] [INFO] [logging.py:96:log_dist] [Rank 0] step={}, skipped={}, lr=[{}], "
                                            "mom=[({}, {})]",
                                            ts, r.step, skipped_, writers::python_float(r.lr.value_or(NAN)),
                                            writers::python_float(c_.beta1), writers::python_float(c_.beta2)));
  }

 private:
  FormatContext c_;
  std::string path_;
  int64_t skipped_ = 0;
};

}  // namespace

std::unique_ptr<FormatWriter> make_deepspeed_writer(const FormatContext& c) {
  return std::make_unique<DeepSpeedWriter>(c);
}

}  // namespace flatline
