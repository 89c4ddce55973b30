// PyTorch Lightning CSVLogger (lightning/pytorch/loggers/csv_logs.py, ExperimentWriter): metrics.csv
// with one row per log_metrics call, columns = every metric name seen (sorted or in insertion
// order, depending on the version: "step" first or last), empty cells where a row did not log that
// metric, plus "step" (the trainer's global_step) and usually "epoch". Metrics logged with
// on_step=True and on_epoch=True get "_step" and "_epoch" columns (train_loss_step is the loss,
// train_loss_epoch an aggregate, ignored). Line endings LF or CRLF (written on Windows). The
// LearningRateMonitor's rows (lr-AdamW, ...) and the training_step's rows (train_loss, ...) of one
// step are merged into one record; val_loss rows become eval records. A log without an lr column is
// read as is (the lr check then cannot run). Column names are mapped by readers/metric_names.h; a
// column named by a tensor's repr ("out_tensor([0.])", self.log of a tensor) is read past. An older
// layout without a step column (train_loss,epoch,created_at: lightning 1.x's ExperimentWriter logged
// created_at) takes the epoch as the step (readers/csv_table.h).
// Rank 0, no t.
#include <filesystem>

#include "readers/csv_table.h"
#include "readers/metric_names.h"
#include "readers/registry.h"
#include "readers/text_util.h"

namespace flatline {
namespace {

std::vector<Record> parse(std::string_view data, const std::string& name, Warnings* w) {
  readers::CsvTable t = readers::read_csv(data, name, w);
  readers::TableSpec spec;
  spec.step_columns = {"step", "global_step", "trainer/global_step"};
  return readers::table_to_records(t, spec, name, w);
}

// A "step" column is Lightning's; W&B's own columns (_step, _runtime, _timestamp) are not.
Sniff sniff(std::string_view head) {
  const auto cols = readers::header_columns(head);
  if (cols.empty()) return Sniff::no;
  for (const char* wb : {"_step", "_runtime", "_timestamp"})
    if (readers::has_column(cols, wb)) return Sniff::no;
  if (readers::has_column(cols, "step")) return Sniff::likely;
  // An older CSVLogger (epoch and created_at, no step): still Lightning's, with a loss column.
  bool loss = false;
  for (const auto& c : cols) loss |= readers::metric_for(c) == readers::Metric::loss;
  return loss && (readers::has_column(cols, "epoch") || readers::has_column(cols, "created_at")) ? Sniff::likely
                                                                                                 : Sniff::maybe;
}

// A log directory: its metrics.csv, else the newest version_N/ (N compared as a number), directly
// or under lightning_logs/.
std::vector<std::string> locate(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(dir + "/metrics.csv", ec)) return {dir + "/metrics.csv"};
  int64_t best = -1;
  std::string best_metrics;
  for (const std::string& parent : {dir, dir + "/lightning_logs"})
    for (const auto& e : fs::directory_iterator(parent, ec)) {
      const std::string n = e.path().filename().string();
      if (!e.is_directory(ec) || n.rfind("version_", 0) != 0 || !fs::exists(e.path() / "metrics.csv", ec)) continue;
      auto k = readers::parse_integer(n.substr(8));
      if (k && *k > best) best = *k, best_metrics = (e.path() / "metrics.csv").string();
    }
  if (best_metrics.empty()) return {};
  return {best_metrics};
}

ReaderDef def() {
  ReaderDef d;
  d.name = "lightning";
  d.summary = "PyTorch Lightning CSVLogger metrics.csv (a log dir: its newest version_N/)";
  d.name_hints = {"metrics.csv"};
  d.sniff = sniff;
  d.parse = parse;
  d.locate = locate;
  d.priority = 50;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
