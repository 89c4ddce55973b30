// CSV tables with libcsv, and columns -> Records (readers/csv_table.h).
#include "readers/csv_table.h"

#include <csv.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "readers/metric_names.h"
#include "readers/text_util.h"

namespace flatline::readers {
namespace {

struct Collect {
  std::vector<std::string> fields;
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> lines;
  size_t line = 0;
  bool at_fini = false;
  bool junk = false;
  size_t half_line = 0;
};

void on_field(void* s, size_t len, void* data) {
  auto* c = static_cast<Collect*>(data);
  std::string f(static_cast<const char*>(s), len);
  for (unsigned char ch : f)
    if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') c->junk = true;
  c->fields.push_back(std::move(f));
}
void on_row(int, void* data) {
  auto* c = static_cast<Collect*>(data);
  if (c->at_fini) {
    c->half_line = c->line;
  } else if (c->junk) {
    c->rows.emplace_back();  // an empty row marks junk
    c->lines.push_back(c->line);
  } else {
    c->rows.push_back(std::move(c->fields));
    c->lines.push_back(c->line);
  }
  c->fields.clear();
  c->junk = false;
}

}  // namespace

CsvTable read_csv(std::string_view data, const std::string& name, Warnings* w) {
  csv_parser p;
  if (csv_init(&p, CSV_STRICT) != 0) throw ReadError(name + ": cannot initialise the CSV parser");
  Collect c;
  size_t pos = 0;
  bool stopped = false;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    size_t end = nl == std::string_view::npos ? data.size() : nl + 1;
    ++c.line;
    size_t got = csv_parse(&p, data.data() + pos, end - pos, on_field, on_row, &c);
    if (got != end - pos) {
      if (w)
        w->push_back(fmt::format("{}: {} (byte {}); reading stops", at_line(name, c.line), csv_strerror(csv_error(&p)),
                                 pos + got));
      stopped = true;
      break;
    }
    pos = end;
  }
  if (!stopped) {
    c.at_fini = true;
    csv_fini(&p, on_field, on_row, &c);
    if (c.half_line && w)
      w->push_back(at_line(name, c.half_line) + ": last row has no newline (half-written?), skipped");
  }
  csv_free(&p);
  CsvTable t;
  size_t i = 0;
  for (; i < c.rows.size() && t.header.empty(); ++i) {
    if (c.rows[i].empty()) {
      if (w) w->push_back(at_line(name, c.lines[i]) + ": binary data, row skipped");
      continue;
    }
    t.header = c.rows[i];
  }
  if (t.header.empty()) throw ReadError(name + ": no CSV header (empty file?)");
  for (; i < c.rows.size(); ++i) {
    if (c.rows[i].empty()) {
      if (w) w->push_back(at_line(name, c.lines[i]) + ": binary data, row skipped");
    } else if (c.rows[i].size() != t.header.size()) {
      if (w)
        w->push_back(fmt::format("{}: {} fields, the header has {}; row skipped", at_line(name, c.lines[i]),
                                 c.rows[i].size(), t.header.size()));
    } else {
      t.rows.push_back({c.lines[i], std::move(c.rows[i])});
    }
  }
  return t;
}

std::vector<std::string> header_columns(std::string_view head) {
  std::string_view l = first_line(head);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  std::vector<std::string> cols;
  if (l.find(',') == std::string_view::npos) return cols;
  std::string cur;
  bool quoted = false;
  for (char c : l) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return {};
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) cols.push_back(std::string(trim(cur))), cur.clear();
    else cur += c;
  }
  cols.push_back(std::string(trim(cur)));
  // A header names columns: a log line with a comma in it (a timestamp's milliseconds) is not one. A
  // column with brackets (Lightning names a logged tensor by its repr: "out_tensor([0.])") is allowed
  // when another column is a metric the readers know (a loss, the step, the epoch).
  bool known = false, odd = false;
  for (const auto& c : cols) {
    if (c.size() > 200) return {};
    odd |= c.find_first_of("[]{}") != std::string::npos;
    known |= metric_for(c) != Metric::none;
  }
  if (odd && !known) return {};
  return cols;
}

bool has_column(const std::vector<std::string>& cols, std::string_view name) {
  for (const auto& c : cols)
    if (c == name) return true;
  return false;
}

std::vector<Record> table_to_records(const CsvTable& t, const TableSpec& spec, const std::string& name, Warnings* w) {
  const size_t n = t.header.size();
  std::vector<Metric> metric(n, Metric::none);
  std::vector<int> step_rank(n, -1);
  int t_col = -1, te_col = -1;
  for (size_t j = 0; j < n; ++j) {
    const std::string h = spec.rename ? spec.rename(t.header[j]) : t.header[j];
    if (h.empty()) continue;
    for (size_t k = 0; k < spec.step_columns.size(); ++k)
      if (h == spec.step_columns[k]) step_rank[j] = static_cast<int>(k);
    if (h == spec.t_column) t_col = static_cast<int>(j);
    if (h == spec.t_epoch_column) te_col = static_cast<int>(j);
    if (step_rank[j] < 0) metric[j] = metric_for(h);
    if (metric[j] == Metric::step) metric[j] = Metric::none;
  }
  // An epoch-level log (Lightning's self.log(on_epoch=True) alone: train_loss_epoch) has no per-step
  // loss: the epoch aggregate is then the loss curve.
  if (std::none_of(metric.begin(), metric.end(), [](Metric m) { return m == Metric::loss; }))
    for (size_t j = 0; j < n; ++j) {
      const std::string& h = t.header[j];
      if (metric[j] == Metric::none && h.size() > 10 && h.compare(h.size() - 10, 10, "loss_epoch") == 0 &&
          h.rfind("val", 0) != 0 && h.rfind("test", 0) != 0) {
        metric[j] = Metric::loss;
        break;
      }
    }
  // No step column (an older CSVLogger wrote epoch and created_at only; a Keras-style history has the
  // row alone): the epoch is the step where there is one, else the row's number (from 1). Said once.
  const bool has_step = std::any_of(step_rank.begin(), step_rank.end(), [](int k) { return k >= 0; });
  int epoch_col = -1;
  for (size_t j = 0; j < n && !has_step; ++j)
    if (metric[j] == Metric::epoch) epoch_col = static_cast<int>(j);
  if (!has_step && w) {
    std::string cols;
    for (const auto& h : t.header) cols += (cols.empty() ? "" : ", ") + h;
    w->push_back(fmt::format("{}: no step column (columns: {}): {} taken as the step", name, cols,
                             epoch_col >= 0 ? "the epoch ('" + t.header[static_cast<size_t>(epoch_col)] + "')"
                                            : std::string("the row number")));
  }
  std::vector<Record> out;
  StepOrder order;
  std::optional<double> t0;
  int64_t last_step_index = -1;  // index in `out` of the last step record
  int64_t row_number = 0;
  for (const CsvRow& row : t.rows) {
    const std::string where = spec.where ? spec.where(row.line) : at_line(name, row.line);
    ++row_number;
    std::optional<int64_t> step;
    if (!has_step) {
      if (epoch_col < 0) {
        step = row_number;
      } else if (auto e = parse_number(row.fields[static_cast<size_t>(epoch_col)]); e && *e >= 0 && std::isfinite(*e)) {
        step = static_cast<int64_t>(std::floor(*e));
      }
    }
    int best = 1 << 30;
    for (size_t j = 0; j < n; ++j)
      if (step_rank[j] >= 0 && step_rank[j] < best && !trim(row.fields[j]).empty()) {
        if (auto s = parse_integer(row.fields[j]); s && *s >= 0) {
          step = s;
          best = step_rank[j];
        } else if (w) {
          w->push_back(fmt::format("{}: column '{}': expected a step number, got '{}'", where, t.header[j], row.fields[j]));
        }
      }
    if (!step) {
      if (w) w->push_back(where + ": no step in this row, skipped");
      continue;
    }
    Record r;
    r.step = *step;
    auto num = [&](size_t j) -> std::optional<double> {
      if (trim(row.fields[j]).empty()) return std::nullopt;
      auto v = parse_number(row.fields[j]);
      if (!v && w) w->push_back(fmt::format("{}: column '{}': expected a number, got '{}'", where, t.header[j], row.fields[j]));
      return v;
    };
    if (t_col >= 0) {
      if (auto v = num(t_col)) r.t = *v;
    } else if (te_col >= 0) {
      if (auto v = num(te_col); v && std::isfinite(*v)) {
        if (!t0) t0 = v;
        r.t = *v - *t0;
      }
    }
    std::optional<double> eval;
    std::vector<Metric> set;
    for (size_t j = 0; j < n; ++j) {
      if (metric[j] == Metric::none) continue;
      auto v = num(j);
      if (!v) continue;
      if (metric[j] == Metric::eval_loss) eval = eval ? eval : v;
      else if (set_metric(r, metric[j], *v) && metric[j] != Metric::epoch) set.push_back(metric[j]);
    }
    if (!set.empty()) {
      // Same step as the previous step record and only new fields: the same step logged in parts.
      Record* prev = last_step_index >= 0 ? &out[static_cast<size_t>(last_step_index)] : nullptr;
      bool merged = false;
      if (prev && prev->step == r.step) {
        bool clash = false;
        for (Metric m : set) {
          clash |= (m == Metric::loss && prev->loss) || (m == Metric::lr && prev->lr) ||
                   (m == Metric::grad_norm && prev->grad_norm) || (m == Metric::loss_scale && prev->loss_scale) ||
                   (m == Metric::param_norm && prev->param_norm) || (m == Metric::skipped && prev->skipped) ||
                   (m == Metric::overflow && prev->overflow);
        }
        if (!clash) {
          if (r.loss) prev->loss = r.loss;
          if (r.lr) prev->lr = r.lr;
          if (r.grad_norm) prev->grad_norm = r.grad_norm;
          if (r.loss_scale) prev->loss_scale = r.loss_scale;
          if (r.param_norm) prev->param_norm = r.param_norm;
          if (r.skipped) prev->skipped = r.skipped;
          if (r.overflow) prev->overflow = r.overflow;
          if (!prev->epoch) prev->epoch = r.epoch;
          if (!std::isfinite(prev->t)) prev->t = r.t;
          merged = true;
        }
      }
      if (!merged && order.accept(0, r.step, where, w)) {
        last_step_index = static_cast<int64_t>(out.size());
        out.push_back(r);
      }
    }
    if (eval) {
      Record e;
      e.kind = RecordKind::eval;
      e.step = r.step;
      e.t = r.t;
      e.epoch = r.epoch;
      e.eval_loss = eval;
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace flatline::readers
