// Hugging Face Trainer state (transformers trainer_callback.py, TrainerState.save_to_json): a JSON
// object whose "log_history" array holds one object per Trainer.log call:
//   {"epoch": 0.1, "grad_norm": 1.2, "learning_rate": 5e-05, "loss": 2.31, "step": 10}   -> step record
//   {"epoch": 1.0, "eval_loss": 2.2, "eval_runtime": 3.1, ..., "step": 500}           -> eval record
//   {"epoch": 3.0, "step": 1500, "train_runtime": ..., "train_loss": ...}            -> skipped (summary)
// Python's json.dump writes bare NaN, Infinity and -Infinity, which JSON (and nlohmann) reject: they
// are turned into strings outside string literals before parsing. Each log_history element is
// parsed on its own, so a truncated or partly corrupt file still yields every complete entry; the
// rest is reported with its line. Rank 0, no wall clock (t unknown).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "readers/metric_names.h"
#include "readers/registry.h"
#include "readers/text_util.h"

namespace flatline {
namespace {
using nlohmann::json;
using readers::at_line;

// Python json -> JSON: bare NaN / Infinity / -Infinity outside strings become "NaN", ... strings.
std::string python_json_to_json(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  bool in_str = false;
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      out += c;
      if (c == '\\' && i + 1 < s.size()) out += s[++i];
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    const bool boundary = i == 0 || !ident(s[i - 1]);
    bool done = false;
    for (std::string_view tok : {"-Infinity", "Infinity", "NaN"}) {
      if (boundary && s.substr(i, tok.size()) == tok && (i + tok.size() == s.size() || !ident(s[i + tok.size()]))) {
        out += '"';
        out += tok;
        out += '"';
        i += tok.size() - 1;
        done = true;
        break;
      }
    }
    if (!done) out += c;
  }
  return out;
}

std::optional<double> number(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return readers::parse_number(v.get_ref<const std::string&>());
  return std::nullopt;
}

// End of the JSON value starting at `i` (an object): index one past its closing brace, or npos.
size_t object_end(const std::string& s, size_t i) {
  int depth = 0;
  bool in_str = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
      if (depth < 0) return std::string::npos;
    }
  }
  return std::string::npos;
}

// Entries that are a summary, not a logging step: trainer.predict's and evaluate's metrics logged
// without a "step" (predict_*, test_*).
bool summary_only(const json& e) {
  for (auto it = e.begin(); it != e.end(); ++it)
    if (it.key().rfind("predict_", 0) == 0 || it.key().rfind("test_", 0) == 0) return true;
  return false;
}

// A number under `key` in the top-level object, after log_history (at `from`): "max_steps": 600.
std::optional<double> top_level_number(const std::string& s, size_t from, const std::string& key) {
  const std::string k = "\"" + key + "\"";
  size_t p = from == std::string::npos ? std::string::npos : s.find(k, from);
  if (p == std::string::npos) p = s.find(k);  // before log_history (unsorted keys)
  if (p == std::string::npos) return std::nullopt;
  p = s.find_first_not_of(" \t\r\n", p + k.size());
  if (p == std::string::npos || s[p] != ':') return std::nullopt;
  p = s.find_first_not_of(" \t\r\n", p + 1);
  if (p == std::string::npos) return std::nullopt;
  const size_t e = s.find_first_of(",}\r\n", p);
  return readers::parse_number(std::string_view(s).substr(p, e == std::string::npos ? std::string::npos : e - p));
}

// The data position the Trainer logs without saying so: "epoch" is epochs_trained + (step in the
// epoch) / steps_in_epoch, so epoch x steps per epoch x train_batch_size is the samples the loader
// has handed out in this run's data order (samples_seen; in batches when train_batch_size is not
// recorded). Steps per epoch from the first two entries that advance both. A resume that does not
// restore the loader's position makes it go back while the step goes on (data_replay).
void data_position(std::vector<Record>& out, const std::vector<std::pair<size_t, double>>& epochs,
                   std::optional<double> batch) {
  double per_epoch = 0;
  for (size_t k = 1; k < epochs.size() && per_epoch <= 0; ++k) {
    const double de = epochs[k].second - epochs[k - 1].second;
    const double ds = static_cast<double>(out[epochs[k].first].step - out[epochs[k - 1].first].step);
    if (de > 0 && ds > 0) per_epoch = std::round(ds / de);
  }
  if (per_epoch <= 0) return;
  const double b = batch && std::isfinite(*batch) && *batch >= 1 ? *batch : 1.0;
  for (const auto& [idx, ep] : epochs) {
    const double pos = std::round(ep * per_epoch) * b;
    if (pos < 9e15) out[idx].samples_seen = static_cast<int64_t>(pos);
  }
}

std::vector<Record> parse(std::string_view data, const std::string& name, Warnings* w) {
  const std::string s = python_json_to_json(data);
  // Line numbers of the original text (the rewrite only adds quotes on a line).
  size_t lo_off = 0, lo_line = 1;  // incremental: offsets only grow
  auto line_of = [&](size_t off) {
    off = std::min(off, s.size());
    if (off < lo_off) lo_off = 0, lo_line = 1;
    lo_line += static_cast<size_t>(std::count(s.begin() + static_cast<long>(lo_off), s.begin() + static_cast<long>(off), '\n'));
    lo_off = off;
    return lo_line;
  };
  size_t key = s.find("\"log_history\"");
  if (key == std::string::npos) throw ReadError(name + ": not a trainer_state.json: no \"log_history\"");
  size_t i = s.find_first_not_of(" \t\r\n", key + 13);
  if (i == std::string::npos || s[i] != ':' ||
      (i = s.find_first_not_of(" \t\r\n", i + 1)) == std::string::npos || s[i] != '[')
    throw ReadError(at_line(name, line_of(key)) + ": \"log_history\" is not an array");
  std::vector<Record> out;
  std::vector<std::pair<size_t, double>> epochs;  // (index in out, the fractional epoch) of step records
  readers::StepOrder order;
  ++i;
  for (;;) {
    i = s.find_first_not_of(" \t\r\n,", i);
    if (i == std::string::npos) {
      if (w) w->push_back(fmt::format("{}: file ends inside log_history (truncated?)", at_line(name, line_of(s.size()))));
      break;
    }
    if (s[i] == ']') break;
    const size_t line = line_of(i);
    const size_t end = s[i] == '{' ? object_end(s, i) : std::string::npos;
    if (end == std::string::npos) {
      if (w) w->push_back(fmt::format("{}: log_history entry not a complete object (truncated or corrupt); reading stops",
                                      at_line(name, line)));
      break;
    }
    json e = json::parse(s.begin() + static_cast<long>(i), s.begin() + static_cast<long>(end), nullptr, false);
    i = end;
    if (e.is_discarded() || !e.is_object()) {
      if (w) w->push_back(at_line(name, line) + ": log_history entry is not valid JSON, skipped");
      continue;
    }
    auto step_it = e.find("step");
    std::optional<double> step = step_it == e.end() ? std::nullopt : number(*step_it);
    if (step_it == e.end() && summary_only(e)) continue;  // trainer.predict/evaluate metrics: no step
    if (!step || !std::isfinite(*step) || *step < 0 || *step > 9e15 || std::floor(*step) != *step) {
      if (w) w->push_back(at_line(name, line) + ": log_history entry without a valid \"step\", skipped");
      continue;
    }
    if (e.contains("train_runtime")) continue;  // the end-of-training summary
    Record r;
    r.step = static_cast<int64_t>(*step);
    bool is_eval = false, any = false;
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (it.key().rfind("eval_", 0) == 0) is_eval = true;
      readers::Metric m = readers::metric_for(it.key());
      if (m == readers::Metric::none || m == readers::Metric::step) continue;
      auto v = number(it.value());
      if (!v) {
        if (w) w->push_back(fmt::format("{}: field '{}': expected a number, got {}", at_line(name, line), it.key(),
                                        it.value().dump(-1, ' ', false, json::error_handler_t::replace)));
        continue;
      }
      if (m == readers::Metric::eval_loss) r.eval_loss = *v;
      else any |= readers::set_metric(r, m, *v) && m != readers::Metric::epoch;
    }
    if (is_eval) {
      r.kind = RecordKind::eval;
      out.push_back(std::move(r));
    } else if (any && order.accept(0, r.step, at_line(name, line), w)) {
      if (auto ep = e.find("epoch"); ep != e.end())
        if (auto x = number(*ep); x && std::isfinite(*x) && *x >= 0) epochs.emplace_back(out.size(), *x);
      out.push_back(std::move(r));
    }
  }
  data_position(out, epochs, top_level_number(s, i, "train_batch_size"));
  return out;
}

// The run is planned to end at max_steps (TrainerState.max_steps).
LogFacts facts(std::string_view data) {
  LogFacts f;
  const std::string s(data);
  if (auto total = top_level_number(s, s.rfind("\"max_steps\""), "max_steps"); total && *total >= 1 && *total < 9e15)
    f.planned_steps = static_cast<int64_t>(*total);
  return f;
}

Sniff sniff(std::string_view head) {
  std::string_view t = readers::trim(head.substr(0, 4096));
  if (t.empty() || t.front() != '{') return Sniff::no;
  return head.find("\"log_history\"") != std::string_view::npos ? Sniff::sure : Sniff::no;
}

// An output directory: its own trainer_state.json, else the newest checkpoint-N/ (by N, not by name).
std::vector<std::string> locate(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(dir + "/trainer_state.json", ec)) return {dir + "/trainer_state.json"};
  int64_t best = -1;
  std::string best_state;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory(ec) && n.rfind("checkpoint-", 0) == 0 && fs::exists(e.path() / "trainer_state.json", ec)) {
      auto k = readers::parse_integer(n.substr(11));
      if (k && *k > best) best = *k, best_state = (e.path() / "trainer_state.json").string();
    }
  }
  if (best_state.empty()) return {};
  return {best_state};
}

ReaderDef def() {
  ReaderDef d;
  d.name = "hf";
  d.summary = "Hugging Face Trainer trainer_state.json (an output dir: its newest checkpoint-N/)";
  d.name_hints = {"trainer_state.json"};
  d.sniff = sniff;
  d.parse = parse;
  d.facts = facts;
  d.locate = locate;
  d.priority = 20;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
