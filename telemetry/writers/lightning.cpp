// PyTorch Lightning's CSVLogger (lightning/pytorch/loggers/csv_logs.py, ExperimentWriter) with a
// LearningRateMonitor: lightning_logs/version_<n>/metrics.csv, a header of every metric key (sorted)
// then one row per log call, empty cells for keys a row did not log. A training row every
// log_every_n_steps (= `every`): epoch, lr-<Optimizer> (LearningRateMonitor's name: lr-AdamW, lr-SGD),
// step (trainer.global_step), train_loss (self.log("train_loss", loss): this rank's value of the
// step, not an interval mean); an eval record adds a row with val_loss. Flushed at every row
// (flush_logs_every_n_steps=1, so a live reader sees it). A new process (a resume) logs to the next
// version_<n>, as a new CSVLogger does.
#include <fmt/format.h>

#include <filesystem>

#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

class LightningWriter : public FormatWriter {
 public:
  explicit LightningWriter(const FormatContext& c) : c_(c) {
    const std::string root = format_dir(c.run_dir, "lightning") + "/lightning_logs";
    int v = 0;
    if (c.resume)
      while (std::filesystem::exists(fmt::format("{}/version_{}", root, v))) ++v;
    else
      std::filesystem::remove_all(root);
    const std::string dir = fmt::format("{}/version_{}", root, v);
    std::filesystem::create_directories(dir);
    path_ = dir + "/metrics.csv";
    lr_key_ = c.optimizer == "sgd" ? "lr-SGD" : "lr-AdamW";
    writers::append_line(path_, "epoch," + lr_key_ + ",step,train_loss,val_loss");
  }

  void write(const Record& r) override {
    auto cell = [](const std::optional<double>& v) { return v ? writers::python_float(*v) : std::string(); };
    if (r.kind == RecordKind::eval && r.eval_loss) {
      writers::append_line(path_, fmt::format("{},,{},,{}", epoch_, r.step, cell(r.eval_loss)));
    } else if (r.kind == RecordKind::step) {
      if (r.epoch) epoch_ = *r.epoch;
      if (r.step % c_.every != 0) return;
      writers::append_line(path_, fmt::format("{},{},{},{},", epoch_, cell(r.lr), r.step, cell(r.loss)));
    }
  }

 private:
  FormatContext c_;
  std::string path_, lr_key_;
  int64_t epoch_ = 0;
};

}  // namespace

std::unique_ptr<FormatWriter> make_lightning_writer(const FormatContext& c) {
  return std::make_unique<LightningWriter>(c);
}

}  // namespace flatline
