// Hugging Face Trainer state (transformers trainer_callback.py, TrainerState.save_to_json:
// json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"), written where the Trainer
// writes it: <output_dir>/checkpoint-<step>/trainer_state.json at each checkpoint (_save_checkpoint)
// and <output_dir>/trainer_state.json at the end (save_state). log_history gets what Trainer.log
// appends every logging_steps (= `every`): {"epoch", "grad_norm", "learning_rate", "loss", "step"},
// loss the interval's mean rounded to 4 digits (_maybe_log_save_evaluate); eval records append
// {"epoch", "eval_loss", "step"}. Non-finite numbers are written bare (NaN, Infinity), as Python's json
// does. A resumed process starts from the checkpoint's log_history, as Trainer does on
// resume_from_checkpoint: entries logged after that checkpoint are lost, as they are for real.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "telemetry/writers/writer.h"

namespace flatline {
namespace {
using nlohmann::json;

// Placeholders for Python's bare NaN / Infinity, replaced after dumping.
json number(double v) {
  if (std::isnan(v)) return "\x01NaN";
  if (std::isinf(v)) return v > 0 ? "\x01Infinity" : "\x01-Infinity";
  return v;
}

class HfWriter : public FormatWriter {
 public:
  explicit HfWriter(const FormatContext& c) : c_(c), dir_(format_dir(c.run_dir, "hf")) {
    std::filesystem::create_directories(dir_);
  }

  void write(const Record& r) override {
    if (r.kind == RecordKind::event && r.name == event::resume) {
      restore(r.step);
    } else if (r.kind == RecordKind::event && r.name == event::checkpoint_save) {
      save(fmt::format("{}/checkpoint-{}", dir_, r.step), r.step);
    } else if (r.kind == RecordKind::event && r.name == event::run_end) {
      save(dir_, r.step);
    } else if (r.kind == RecordKind::eval && r.eval_loss) {
      history_.push_back({{"epoch", epoch_}, {"eval_loss", number(*r.eval_loss)}, {"step", r.step}});
    } else if (r.kind == RecordKind::step) {
      loss_.add(r);
      if (r.epoch) epoch_ = static_cast<double>(*r.epoch);
      if (r.step % c_.every != 0) return;
      json e = {{"epoch", epoch_}, {"step", r.step}};
      if (auto l = loss_.take()) e["loss"] = number(std::round(*l * 1e4) / 1e4);
      if (r.grad_norm) e["grad_norm"] = number(*r.grad_norm);
      if (r.lr) e["learning_rate"] = number(*r.lr);
      history_.push_back(std::move(e));
    }
  }

 private:
  void save(const std::string& dir, int64_t step) {
    std::filesystem::create_directories(dir);
    json s = {{"best_metric", nullptr},
              {"best_model_checkpoint", nullptr},
              {"epoch", epoch_},
              {"eval_steps", 500},
              {"global_step", step},
              {"is_hyper_param_search", false},
              {"is_local_process_zero", true},
              {"is_world_process_zero", true},
              {"log_history", history_},
              {"logging_steps", c_.every},
              {"max_steps", c_.train_iters},
              {"num_input_tokens_seen", 0},
              {"num_train_epochs", 1},
              {"save_steps", 500},
              {"stateful_callbacks", json::object()},
              {"total_flos", 0.0},
              {"train_batch_size", c_.world_size > 0 ? c_.global_batch / c_.world_size : c_.global_batch},
              {"trial_name", nullptr},
              {"trial_params", nullptr}};
    std::string text = s.dump(2);
    for (const char* tok : {"NaN", "Infinity", "-Infinity"}) {
      const std::string quoted = std::string("\"\\u0001") + tok + "\"";
      for (size_t p; (p = text.find(quoted)) != std::string::npos;) text.replace(p, quoted.size(), tok);
    }
    const std::string path = dir + "/trainer_state.json", tmp = path + ".tmp";
    {
      std::ofstream out(tmp);
      out << text << "\n";
      if (!out) throw std::runtime_error(path + ": write failed");
    }
    std::filesystem::rename(tmp, path);
  }

  void restore(int64_t step) {
    std::ifstream in(fmt::format("{}/checkpoint-{}/trainer_state.json", dir_, step));
    if (!in) return;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* tok : {"-Infinity", "Infinity", "NaN"}) {
      const std::string bare = std::string(": ") + tok;
      for (size_t p; (p = text.find(bare)) != std::string::npos;)
        text.replace(p, bare.size(), std::string(": \"\\u0001") + tok + "\"");
    }
    json s = json::parse(text, nullptr, false);
    if (s.is_object() && s.contains("log_history")) history_ = s["log_history"];
  }

  FormatContext c_;
  std::string dir_;
  json history_ = json::array();
  double epoch_ = 0;
  writers::IntervalLoss loss_;
};

}  // namespace

std::unique_ptr<FormatWriter> make_hf_writer(const FormatContext& c) { return std::make_unique<HfWriter>(c); }

}  // namespace flatline
