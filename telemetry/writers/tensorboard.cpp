// TensorBoard event file as the Hugging Face Trainer's TensorBoardCallback writes it
// (transformers/integrations/integration_utils.py, on_log: rewrite_logs() prefixes "train/" to the
// training keys and turns "eval_loss" into "eval/loss"; one SummaryWriter.add_scalar per key, then
// flush()): TFRecord-framed Event protos (telemetry/tfrecord.h, telemetry/tensorboard.proto), the first one
// file_version "brain.Event:2" (tensorboard/summary/writer/event_file_writer.py), named
// events.out.tfevents.<unix seconds>.<host>.<pid>.0. Every `every` steps: train/loss (the interval's
// mean, HF's tr_loss / steps rounded to 4 digits), train/grad_norm, train/learning_rate (the lr this
// step used: HF logs the scheduler's lr after its step, one step ahead), train/epoch; eval records:
// eval/loss. wall_time = the run's origin + t. A restarted process opens a new file, as a new
// SummaryWriter does.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "telemetry/tensorboard.pb.h"
#include "telemetry/tfrecord.h"
#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

class TensorBoardWriter : public FormatWriter {
 public:
  explicit TensorBoardWriter(const FormatContext& c) : c_(c) {
    const std::string dir = format_dir(c.run_dir, "tensorboard");
    std::filesystem::create_directories(dir);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const double now = c.wall_t0 > 0 ? c.wall_t0 : 0;
    path_ = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}.{}", dir, static_cast<int64_t>(now), host, ::getpid(),
                        c.resume ? 1 : 0);
    out_.open(path_, std::ios::binary | std::ios::trunc);
    if (!out_) throw std::runtime_error(path_ + ": cannot open for writing");
    tb::Event e;
    e.set_wall_time(now);
    e.set_file_version("brain.Event:2");
    put(e);
  }

  void write(const Record& r) override {
    const double wall = c_.wall_t0 + (std::isfinite(r.t) ? r.t : 0);
    if (r.kind == RecordKind::eval && r.eval_loss) {
      scalar("eval/loss", *r.eval_loss, r.step, wall);
      out_.flush();
      return;
    }
    if (r.kind != RecordKind::step) return;
    loss_.add(r);
    if (r.step % c_.every != 0) return;
    if (auto l = loss_.take()) scalar("train/loss", std::round(*l * 1e4) / 1e4, r.step, wall);
    if (r.grad_norm) scalar("train/grad_norm", *r.grad_norm, r.step, wall);
    if (r.lr) scalar("train/learning_rate", *r.lr, r.step, wall);
    if (r.epoch) scalar("train/epoch", static_cast<double>(*r.epoch), r.step, wall);
    out_.flush();
    if (!out_) throw std::runtime_error(path_ + ": write failed");
  }

 private:
  void scalar(const char* tag, double v, int64_t step, double wall) {
    tb::Event e;
    e.set_wall_time(wall);
    e.set_step(step);
    auto* val = e.mutable_summary()->add_value();
    val->set_tag(tag);
    val->set_simple_value(static_cast<float>(v));
    put(e);
  }
  void put(const tb::Event& e) {
    const std::string rec = frame_tfrecord(e.SerializeAsString());
    out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  }
  FormatContext c_;
  std::string path_;
  std::ofstream out_;
  writers::IntervalLoss loss_;
};

}  // namespace

std::unique_ptr<FormatWriter> make_tensorboard_writer(const FormatContext& c) {
  return std::make_unique<TensorBoardWriter>(c);
}

}  // namespace flatline
