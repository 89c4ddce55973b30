// A Weights & Biases run history as its CSV export has it (wandb.Api().run(...).history().to_csv()),
// for a run logged by the Hugging Face integration (transformers/integrations/integration_utils.py,
// WandbCallback.on_log: rewrite_logs() keys plus train/global_step): history.csv with _step (W&B's own
// row counter from 0), _runtime (seconds since the run started), _timestamp (Unix seconds), then
// eval/loss, train/epoch, train/global_step, train/grad_norm, train/learning_rate, train/loss. A row
// every logging_steps (= `every`), the loss the interval's mean (as HF's Trainer.log); eval records
// are rows of their own. A resumed process appends (wandb.init(resume=...) continues _step).
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

class WandbWriter : public FormatWriter {
 public:
  explicit WandbWriter(const FormatContext& c) : c_(c), path_(writers::log_file(c, "wandb", "history.csv")) {
    if (std::filesystem::exists(path_)) {  // a resume: W&B continues the run's _step
      std::ifstream in(path_);
      for (std::string l; std::getline(in, l);) ++row_;
      --row_;  // the header
    } else {
      writers::append_line(path_, "_step,_runtime,_timestamp,eval/loss,train/epoch,train/global_step,train/grad_norm,"
                                  "train/learning_rate,train/loss");
    }
  }

  void write(const Record& r) override {
    auto cell = [](const std::optional<double>& v) { return v ? writers::python_float(*v) : std::string(); };
    const double t = std::isfinite(r.t) ? r.t : 0;
    const std::string head = fmt::format("{},{},{}", row_, writers::python_float(t), writers::python_float(c_.wall_t0 + t));
    if (r.kind == RecordKind::eval && r.eval_loss) {
      writers::append_line(path_, fmt::format("{},{},{},{},,,", head, cell(r.eval_loss), epoch_, r.step));
      ++row_;
    } else if (r.kind == RecordKind::step) {
      loss_.add(r);
      if (r.epoch) epoch_ = static_cast<double>(*r.epoch);
      if (r.step % c_.every != 0) return;
      auto l = loss_.take();
      writers::append_line(path_, fmt::format("{},,{},{},{},{},{}", head, epoch_, r.step, cell(r.grad_norm), cell(r.lr),
                                              l ? writers::python_float(std::round(*l * 1e4) / 1e4) : ""));
      ++row_;
    }
  }

 private:
  FormatContext c_;
  std::string path_;
  int64_t row_ = 0;
  double epoch_ = 0;
  writers::IntervalLoss loss_;
};

}  // namespace

std::unique_ptr<FormatWriter> make_wandb_writer(const FormatContext& c) { return std::make_unique<WandbWriter>(c); }

}  // namespace flatline
