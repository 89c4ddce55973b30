// Readers for the logs engineers already have: each turns one log format into flatline Records
// (telemetry/record.h) so that the same detectors and checklist run on it (docs/DESIGN.md §10). One reader per file, all behind one
// signature (ParseFn):
//
//   flatline     telemetry/rank-<r>.jsonl (readers/flatline_jsonl.cpp)
//   hf           Hugging Face Trainer trainer_state.json (readers/hf_trainer.cpp)
//   megatron     Megatron-LM training log lines (readers/megatron.cpp)
//   deepspeed    DeepSpeed engine / loss-scaler log lines (readers/deepspeed.cpp)
//   lightning    PyTorch Lightning CSVLogger metrics.csv (readers/lightning_csv.cpp)
//   wandb        Weights & Biases history CSV export (readers/wandb_csv.cpp)
//   tensorboard  TensorBoard event files, TFRecord framed (readers/tensorboard.cpp)
//
// Errors, two tiers: a reader skips what it cannot use and says so in a warning that names the
// file and the 1-based line ("file:12: ...") or the byte offset ("file: byte 4096: ..."); it
// throws ReadError (and only ReadError) when nothing in the input is usable. Never anything else:
// every reader is fuzzed (fuzz/) against exactly this contract.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/record.h"

namespace flatline {

enum class LogFormat { auto_detect, flatline, hf, megatron, deepspeed, lightning, wandb, tensorboard };

const char* to_string(LogFormat f);
// "auto", "flatline", "hf", ...; throws std::invalid_argument naming the accepted values.
LogFormat parse_log_format(const std::string& s);

// The input cannot be read at all (missing, empty, not this format, no usable record).
class ReadError : public std::runtime_error {
 public:
  explicit ReadError(const std::string& what) : std::runtime_error(what) {}
};

using Warnings = std::vector<std::string>;

// The common signature: `data` is the whole file, `name` its path (for messages).
using ParseFn = std::vector<Record> (*)(std::string_view data, const std::string& name, Warnings* w);

std::vector<Record> parse_flatline_jsonl(std::string_view data, const std::string& name, Warnings* w);
std::vector<Record> parse_hf_trainer_state(std::string_view data, const std::string& name, Warnings* w);
std::vector<Record> parse_megatron_log(std::string_view data, const std::string& name, Warnings* w);
std::vector<Record> parse_deepspeed_log(std::string_view data, const std::string& name, Warnings* w);
std::vector<Record> parse_lightning_csv(std::string_view data, const std::string& name, Warnings* w);
std::vector<Record> parse_wandb_csv(std::string_view data, const std::string& name, Warnings* w);
std::vector<Record> parse_tensorboard_events(std::string_view data, const std::string& name, Warnings* w);

ParseFn parser_for(LogFormat f);  // nullptr for auto_detect

// Guesses the format of one file from its name and its first bytes; auto_detect when unsure.
LogFormat detect_format(const std::string& path, std::string_view head);

// What read_log found: records in recorded order (ranks merged by t, stable), the files read.
struct LogData {
  LogFormat format = LogFormat::auto_detect;
  std::vector<std::string> files;
  std::vector<Record> records;
  Warnings warnings;
  int world_size = 0;  // ranks, where the format says (flatline rank files); 0 = infer
};

// Reads a file or a directory (a flatline run dir, a dir of rank-*.jsonl, an HF output/checkpoint
// dir with trainer_state.json, a Lightning log dir with metrics.csv, a TensorBoard log dir).
// `format` forces the reader; auto_detect guesses per file. Throws ReadError when nothing is usable.
LogData read_log(const std::string& path, LogFormat format = LogFormat::auto_detect);

// Merges records of several files (ranks) by t, stable: a record without t sorts with the record
// before it in its own file; ties keep file order.
std::vector<Record> merge_by_time(const std::vector<std::vector<Record>>& files);

}  // namespace flatline
