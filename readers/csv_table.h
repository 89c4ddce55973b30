// CSV metrics tables (Lightning metrics.csv, W&B history exports): parsing with libcsv (Debian
// libcsv-dev, RFC 4180 quoting, strict mode) into a header and rows tagged with their line, and
// the shared conversion of columns to Records through readers/metric_names.h.
// Bad input: a row whose field count differs from the header, a quote error (strict mode: reading
// stops there, byte offset given), binary junk, a half-written last row (no newline): warnings,
// the row skipped. No header at all (empty file): ReadError.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "readers/reader.h"

namespace flatline::readers {

struct CsvRow {
  size_t line = 0;  // 1-based line where the row ends
  std::vector<std::string> fields;
};

struct CsvTable {
  std::vector<std::string> header;
  std::vector<CsvRow> rows;
};

CsvTable read_csv(std::string_view data, const std::string& name, Warnings* w);

// The column names of the first non-blank line of `head` (for sniffers: quotes stripped, no libcsv),
// empty when it does not look like a CSV header (no comma, or control bytes).
std::vector<std::string> header_columns(std::string_view head);
bool has_column(const std::vector<std::string>& cols, std::string_view name);

struct TableSpec {
  std::vector<std::string> step_columns;  // the first non-empty one gives the step
  std::string t_column;                   // seconds since start ("_runtime"); "" = none
  std::string t_epoch_column;             // Unix seconds ("_timestamp"), made relative; "" = none
  // Maps a header name to the metric name to look up ("" drops the column).
  std::function<std::string(const std::string&)> rename;
  // Where a row is, for messages: default "name:line" (CsvRow::line); a binary log gives byte offsets.
  std::function<std::string(size_t)> where;
};

// One step record per step (consecutive rows of the same step are merged when they set different
// fields; a row that repeats fields of the same step is a duplicate: warned and dropped), and one
// eval record per row with an eval loss. Rank 0.
std::vector<Record> table_to_records(const CsvTable& t, const TableSpec& spec, const std::string& name, Warnings* w);

}  // namespace flatline::readers
