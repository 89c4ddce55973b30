// Weights & Biases history as CSV, in the two shapes people have:
//  - the API export (wandb.Api().run(...).history().to_csv(), or scan_history): columns _step (W&B's
//    own log counter), _runtime (seconds since start), _timestamp (Unix seconds) and the logged keys,
//    e.g. train/loss, train/learning_rate, train/grad_norm, train/epoch, train/global_step (the HF
//    Trainer integration);
//  - the UI panel export: "Step" and "<run name> - train/loss", with "__MIN" / "__MAX" companions
//    (dropped).
// The step is train/global_step (or global_step / trainer/global_step) when logged, else _step / Step;
// t = _runtime, else _timestamp relative to its first value. Names are mapped by
// readers/metric_names.h. Rank 0.
#include "readers/csv_table.h"
#include "readers/registry.h"

namespace flatline {
namespace {

std::vector<Record> parse(std::string_view data, const std::string& name, Warnings* w) {
  readers::CsvTable t = readers::read_csv(data, name, w);
  readers::TableSpec spec;
  spec.step_columns = {"train/global_step", "trainer/global_step", "global_step", "_step", "Step"};
  spec.t_column = "_runtime";
  spec.t_epoch_column = "_timestamp";
  spec.rename = [](const std::string& h) -> std::string {
    if (h.size() > 5 && (h.compare(h.size() - 5, 5, "__MIN") == 0 || h.compare(h.size() - 5, 5, "__MAX") == 0))
      return "";
    auto dash = h.find(" - ");
    return dash == std::string::npos ? h : h.substr(dash + 3);
  };
  return readers::table_to_records(t, spec, name, w);
}

// W&B's reserved keys name the API export; "Step" with "<run> - <key>" columns the UI panel export.
Sniff sniff(std::string_view head) {
  const auto cols = readers::header_columns(head);
  if (cols.empty()) return Sniff::no;
  for (const char* wb : {"_step", "_runtime", "_timestamp"})
    if (readers::has_column(cols, wb)) return Sniff::sure;
  if (readers::has_column(cols, "Step"))
    for (const auto& c : cols)
      if (c.find(" - ") != std::string::npos) return Sniff::likely;
  return Sniff::maybe;
}

ReaderDef def() {
  ReaderDef d;
  d.name = "wandb";
  d.summary = "Weights & Biases history exported as CSV (API or UI panel export)";
  d.name_hints = {"*.csv"};
  d.sniff = sniff;
  d.parse = parse;
  d.priority = 60;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
