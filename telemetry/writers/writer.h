// Foreign-format log writers: rank 0's telemetry records, as they are written, turned into the logs
// real frameworks write, so that a detector that watches TensorBoard, a trainer_state.json, a Megatron
// or DeepSpeed log, a Lightning metrics.csv or a W&B history is scored live like one reading stdin
// (docs/DETECTORS.md). Each writer follows its framework (the file a reader of flatline's readers/
// finds, the fields it carries, logging every `every` steps on rank 0) and is checked by a round trip
// through that reader. One file per format (telemetry/writers/<format>.cpp), behind one interface.
// Torch-free: the trainer attaches a FormatSink to rank 0's background record writer
// (telemetry/async_writer.h), so nothing here runs on the training step; replays drive the same
// writers (cli/reenact.h).
//
// Layout: <run_dir>/formats/<format>/...
//   tensorboard  events.out.tfevents.<time>.<host>.<pid>.0   (HF TensorBoardCallback's tags)
//   hf           checkpoint-<step>/trainer_state.json at each checkpoint, trainer_state.json at the end
//   megatron     train.log                                    (training_log's iteration lines)
//   deepspeed    train.log                                    (engine progress + loss scaler lines)
//   lightning    lightning_logs/version_<n>/metrics.csv       (CSVLogger; a resume opens version n+1)
//   wandb        history.csv                                  (the history export of the HF integration)
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "run/scenario.h"
#include "telemetry/record.h"

namespace flatline {

// What a writer needs to know about the run beyond its records.
struct FormatContext {
  std::string run_dir;
  int every = 1;               // log every N steps (HF logging_steps, Megatron log_interval, ...)
  int world_size = 1;
  int64_t global_batch = 1;    // samples per optimizer step over all ranks
  int64_t train_iters = 0;     // the run's steps
  std::string optimizer = "adamw";
  double beta1 = 0.9, beta2 = 0.999;
  double wall_t0 = 0;          // Unix seconds of the run's t = 0 (event wall times, timestamps)
  bool resume = false;         // a restarted process: append, or what the framework does on resume
};

// The context of a run of `s` (run_t0: the run's origin, Unix seconds; 0: now).
FormatContext format_context(const Scenario& s, const std::string& run_dir, double run_t0, bool resume);

class FormatWriter {
 public:
  virtual ~FormatWriter() = default;
  virtual void write(const Record& r) = 0;  // every rank-0 record, in order
};

const std::vector<std::string>& format_kinds();  // tensorboard, hf, megatron, deepspeed, lightning, wandb, wandb-run
bool is_format_name(const std::string& s);
std::string format_names();                      // "tensorboard|hf|..."
// Throws std::invalid_argument for an unknown format.
std::unique_ptr<FormatWriter> make_format_writer(const std::string& format, const FormatContext& c);

std::string format_dir(const std::string& run_dir, const std::string& format);  // <run_dir>/formats/<format>
// FLATLINE_FORMATS=tensorboard,hf and FLATLINE_LOG_<FORMAT>=<its directory>, for detectors.
std::vector<std::pair<std::string, std::string>> format_env(const std::string& run_dir,
                                                            const std::vector<std::string>& formats);

// All of a run's writers; a writer that fails (disk full) stops, the others and training go on.
class FormatSink {
 public:
  FormatSink(const std::vector<std::string>& formats, const FormatContext& c);
  void write(const Record& r);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<FormatWriter>>> writers_;
  std::vector<std::string> errors_;
};

namespace writers {
// Shared by the writers: the loss a logger reports for an interval (mean over its logged steps, as
// HF's tr_loss / steps and Megatron's averaged losses do), and time formats.
class IntervalLoss {
 public:
  void add(const Record& r);                   // a step record
  std::optional<double> take();                // mean since the last take, and restart
 private:
  double sum_ = 0;
  int n_ = 0;
};
std::string utc_time(double unix_s, bool millis);  // "2026-11-29 10:00:00" or "... 10:00:00,123"
void append_line(const std::string& path, const std::string& line);  // one write, flushed; throws
// <run_dir>/formats/<format>/<name>, its directory created; a fresh run (not a resume) starts it empty.
std::string log_file(const FormatContext& c, const std::string& format, const std::string& name);
std::string python_float(double v);                // repr(): 0.001, 1e-05, nan, inf
}  // namespace writers

}  // namespace flatline
