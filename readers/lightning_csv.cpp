// PyTorch Lightning CSVLogger (lightning/pytorch/loggers/csv_logs.py, ExperimentWriter): metrics.csv
// with one row per log_metrics call, columns = every metric name seen (sorted or in insertion
// order, depending on the version), empty cells where a row did not log that metric, plus "step"
// (the trainer's global_step) and usually "epoch". The LearningRateMonitor's rows (lr-AdamW, ...)
// and the training_step's rows (train_loss, ...) of one step are merged into one record; val_loss
// rows become eval records. Column names are mapped by readers/metric_names.h. Rank 0, no t.
#include "readers/csv_table.h"
#include "readers/reader.h"

namespace flatline {

std::vector<Record> parse_lightning_csv(std::string_view data, const std::string& name, Warnings* w) {
  readers::CsvTable t = readers::read_csv(data, name, w);
  readers::TableSpec spec;
  spec.step_columns = {"step", "global_step", "trainer/global_step"};
  return readers::table_to_records(t, spec, name, w);
}

}  // namespace flatline
