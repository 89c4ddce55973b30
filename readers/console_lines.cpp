// The lines any training console prints (readers/text_log.h console_line): PyTorch's distributed failure
// lines, torch.distributed.elastic's failure summary, Python tracebacks, and the prints of training
// scripts (epoch/iteration lines, HF log dicts, tqdm bars).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "readers/metric_names.h"
#include "readers/text_log.h"
#include "readers/text_util.h"

namespace flatline::readers {
namespace {

bool has(std::string_view s, std::string_view x) { return contains(s, x); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

namespace {

// The failure lines of torch.distributed (c10d ProcessGroupNCCL.cpp watchdog, gloo's tcp transport,
// the TCPStore, torch/distributed/elastic/multiprocessing/api.py and errors/__init__.py).
bool dist_failure(std::string_view l) {
  static const char* kPatterns[] = {
      "Watchdog caught collective operation timeout",  // ProcessGroupNCCL::WorkNCCL::checkTimeout
      "Some NCCL operations have failed or timed out",
      "Heartbeat monitor timed out",
      "NCCL communicator was aborted",
      "DistBackendError",
      "ncclInternalError",
      "ncclSystemError",
      "ncclRemoteError",
      "NCCL error",
      "Connection closed by peer",  // gloo/transport/tcp/pair.cc
      "Connection reset by peer",
      "DistStoreError",
      "Socket Timeout",
      "ChildFailedError",  // torch.distributed.elastic
      // a rank's own death, as the console shows it: CUDA's allocator (torch.OutOfMemoryError, and
      // "RuntimeError: CUDA out of memory" before torch 2.1), a CUDA error, and the elastic agent
      // ending the others (api.py: "Sending process 1234 closing signal SIGTERM")
      "CUDA out of memory",
      "OutOfMemoryError",
      "CUDA error: ",
      "closing signal SIGTERM",
      "closing signal SIGKILL",
      // a run stopped from outside: Ctrl-C (Python's KeyboardInterrupt), DeepSpeed's launcher killing its
      // ranks (launch.py sigkill_handler: "Killing subprocess N", "Main process received SIGTERM"), a
      // shell's job report of a hang-up ("line 114: 1234 Hangup  cmd ...")
      "KeyboardInterrupt",
      "sigkill_handler",
      "Killing subprocess",
      "Main process received SIGTERM",
      " Hangup ",
      // the scheduler ending it (Slurm slurmstepd/req.c: "*** JOB|STEP <id> ON <node> CANCELLED AT <time>
      // [DUE TO TIME LIMIT|PREEMPTION|NODE FAILURE] ***"; srun: "Job step aborted: Waiting up to N seconds")
      " CANCELLED AT ",
      "Job step aborted",
  };
  for (const char* p : kPatterns)
    if (has(l, p)) return true;
  // gloo/transport/tcp/unbound_buffer.cc: "Timed out waiting 1800000ms for recv operation to complete"
  if (has(l, "Timed out waiting") && has(l, "ms for")) return true;
  // elastic/multiprocessing/api.py: "failed (exitcode: -6) local_rank: 1 (pid: 1234) of binary: ..."
  return has(l, "failed (exitcode:") && has(l, "local_rank:");
}

// A Python dict literal printed by a script ("{'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.1}",
// HF Trainer's ProgressCallback.on_log): key -> value text. Values wrapped as np.float64(x) or
// tensor(x) are unwrapped; strings and nested values are skipped.
std::vector<std::pair<std::string, std::string>> python_dict(std::string_view s) {
  std::vector<std::pair<std::string, std::string>> out;
  s = trim(s);
  if (s.size() < 4 || s.front() != '{' || s.back() != '}') return out;
  s = s.substr(1, s.size() - 2);
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) break;
    const char q = s[i];
    size_t ke = s.find(q, i + 1);
    if (ke == std::string_view::npos) break;
    std::string key(s.substr(i + 1, ke - i - 1));
    i = ke + 1;
    while (i < s.size() && s[i] == ' ') ++i;
    if (i >= s.size() || s[i] != ':') break;
    ++i;
    int depth = 0;
    bool in_str = false;
    char sq = 0;
    size_t vs = i;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      if (in_str) {
        if (c == sq) in_str = false;
      } else if (c == '\'' || c == '"') {
        in_str = true, sq = c;
      } else if (c == '(' || c == '[' || c == '{') {
        ++depth;
      } else if (c == ')' || c == ']' || c == '}') {
        --depth;
      } else if (c == ',' && depth == 0) {
        break;
      }
    }
    std::string_view v = trim(s.substr(vs, i - vs));
    // transformers >= 4.50 prints the values formatted ('2.784', "%.4g"); older ones bare numbers.
    if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
    if (auto p = v.find('('); p != std::string_view::npos && v.back() == ')') v = trim(v.substr(p + 1, v.size() - p - 2));
    if (auto c = v.find(','); c != std::string_view::npos) v = v.substr(0, c);  // tensor(1.2, device=...)
    out.emplace_back(std::move(key), std::string(v));
  }
  return out;
}

// The step a tqdm bar shows: "... 60/600 [00:20<03:00, ...]" (the last one on the line).
std::optional<int64_t> tqdm_step(std::string_view l) {
  std::optional<int64_t> best;
  for (size_t p = find(l, " ["); p != std::string_view::npos; p = find(l, " [", p + 2)) {
    size_t slash = l.rfind('/', p);
    if (slash == std::string_view::npos || slash == 0) continue;
    size_t b = slash;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(l[b - 1]))) --b;
    auto n = parse_integer(l.substr(b, slash - b));
    auto m = parse_integer(l.substr(slash + 1, p - slash - 1));
    if (n && m && b < slash && *n <= *m) best = n;
  }
  return best;
}

// Phase hints of lines that are not progress (for the trailing gap, and checkpoint events).
std::string phase_of(std::string_view l) {
  std::string s(l.substr(0, 200));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  // normal ends: Megatron-LM ("after training is done", "exiting program"), HF Trainer (its
  // train_runtime summary, "Training completed"), DeepSpeed's launcher ("Process N exits
  // successfully."), scripts ("training finished", "exited successfully", "finished successfully")
  if (has(s, "after training is done") || has(s, "exiting program") || has(s, "training completed") ||
      has(s, "'train_runtime'") || has(s, "training finished") || has(s, "exits successfully") ||
      has(s, "exited successfully") || has(s, "finished successfully") || has(s, "training complete"))
    return "end";
  if (has(s, "saving checkpoint") || has(s, "saving model checkpoint") || has(s, "saved checkpoint") ||
      has(s, "save_checkpoint") || has(s, "checkpoint saved"))
    return "checkpoint";
  if (has(s, "validation") || has(s, "evaluat")) return "eval";
  return "";
}

}  // namespace

namespace {

void report_console(TextLog& log, Record r) {
  // With a framework's own progress lines, a script's print belongs to the step they last reported.
  if (log.saw(Source::ds_progress)) {
    r.step = log.last_step();
    log.report(Source::console, std::move(r));
    return;
  }
  if (r.step <= log.last_of(Source::console)) r.step = log.last_of(Source::console) + 1;
  log.report(Source::console, std::move(r));
}

// torch.distributed.elastic's failure summary (errors/__init__.py, ChildFailedError.format_msg):
//   Root Cause (first observed failure):
//   [0]:
//     time      : 2024-01-01_12:40:05
//     host      : node1
//     rank      : 1 (local_rank: 1)
//     exitcode  : -6 (pid: 1234)
//     error_file: <N/A>
//     traceback : Signal 6 (SIGABRT) received by PID 1234
bool root_cause(TextLog& log, std::string_view l) {
  ConsoleState& c = log.console;
  std::string_view t = trim(l);
  if (has(t, "Root Cause (first observed failure)")) {
    c.in_root_cause = true;
    c.rc_rank.clear(), c.rc_exit.clear(), c.rc_trace.clear();
    return true;
  }
  if (!c.in_root_cause) return false;
  auto value = [&](std::string_view key) -> std::optional<std::string> {
    if (!starts_with(t, key)) return std::nullopt;
    auto colon = t.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    return std::string(trim(t.substr(colon + 1)));
  };
  if (auto v = value("rank")) c.rc_rank = *v;
  else if (auto v = value("exitcode")) c.rc_exit = *v;
  else if (auto v = value("traceback")) c.rc_trace = *v;
  const bool end = starts_with(t, "====") || (!c.rc_trace.empty() && starts_with(t, "traceback"));
  if (end && (!c.rc_rank.empty() || !c.rc_exit.empty())) {
    Record e;
    e.kind = RecordKind::event;
    e.name = event::error;
    e.detail = fmt::format("torch.distributed.elastic ChildFailedError: rank {} failed, exitcode {}{}",
                           c.rc_rank.empty() ? "?" : c.rc_rank, c.rc_exit.empty() ? "?" : c.rc_exit,
                           c.rc_trace.empty() ? "" : " (" + c.rc_trace + ")");
    log.event(std::move(e));
    c.in_root_cause = false;
  } else if (starts_with(t, "====")) {
    c.in_root_cause = false;
  }
  return true;
}

}  // namespace

namespace {

// A dict waiting for its step: the tqdm bar redrawn after it names it (ProgressCallback.on_log prints
// with tqdm.write, which redraws the bar, already advanced to the logged step); a bar that does not
// advance, or any other line first, leaves it the next step after the last.
void flush_dict(TextLog& log, std::optional<int64_t> bar) {
  ConsoleState& c = log.console;
  if (!c.dict) return;
  Record r = std::move(*c.dict);
  c.dict.reset();
  const int64_t last = log.last_of(Source::console);
  r.step = bar && *bar > last ? *bar : last + 1;
  report_console(log, std::move(r));
}

void on_bar(TextLog& log, int64_t n) {
  log.console.bar = n;
  flush_dict(log, n);
}

}  // namespace

void console_end(TextLog& log) { flush_dict(log, std::nullopt); }

void console_before(TextLog& log, std::string_view line) {
  // A waiting dict takes its step from a bar drawn right after it; any other line comes too late.
  if (log.console.dict && !tqdm_step(line.substr(0, line.find('\r'))) && line.find('\r') == std::string_view::npos)
    flush_dict(log, std::nullopt);
}

std::optional<Record> failure_event(std::string_view line) {
  std::string_view t = trim(strip_torchrun(strip_host(line)));
  if (!dist_failure(t)) return std::nullopt;
  Record e;
  e.kind = RecordKind::event;
  e.name = event::error;
  e.detail = std::string(t.substr(0, kMaxDetail));
  return e;
}

// "Epoch N" (or "epoch N/M", "[Epoch N]"), "Iteration N", "Iter N" or "Step N", and a training loss on one
// line; the loss is the number after the first "loss" word not preceded by val/valid/test/eval (within 6
// characters), the validation loss the one that is. Returns the step record (step = the iteration or
// step where the line has one, else the epoch), with eval_loss holding the validation loss for the caller.
std::optional<Record> epoch_print(std::string_view t) {
  std::string low(t.substr(0, 400));
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
  // the integer after a counter word: "epoch 3", "Iteration 12:", "step=40", "[Epoch 2]"
  auto counter = [&low](std::string_view word) -> std::optional<int64_t> {
    for (size_t at = low.find(word); at != std::string::npos; at = low.find(word, at + 1)) {
      if (at > 0 && std::isalpha(static_cast<unsigned char>(low[at - 1]))) continue;  // "substeps", "timestep"
      size_t i = at + word.size();
      if (i < low.size() && low[i] == 's') ++i;  // "steps 10"
      while (i < low.size() && (low[i] == ' ' || low[i] == ':' || low[i] == '=' || low[i] == '[' || low[i] == '#')) ++i;
      size_t j = i;
      while (j < low.size() && std::isdigit(static_cast<unsigned char>(low[j]))) ++j;
      if (j > i) return parse_integer(low.substr(i, j - i));
    }
    return std::nullopt;
  };
  const std::optional<int64_t> epoch = counter("epoch");
  std::optional<int64_t> iteration = counter("iteration");
  if (!iteration) iteration = counter("iter");
  if (!iteration) iteration = counter("step");
  if (!epoch && !iteration) return std::nullopt;
  // the number after a key at `k` ("loss: 0.31", "loss = 0.31", "lr 5e-05")
  auto number_at = [&low](size_t k) -> std::optional<double> {
    while (k < low.size() && (low[k] == ' ' || low[k] == ':' || low[k] == '=')) ++k;
    size_t e = k;
    while (e < low.size() && (std::isdigit(static_cast<unsigned char>(low[e])) || low[e] == '.' || low[e] == '-' ||
                              low[e] == 'e' || low[e] == '+'))
      ++e;
    return e > k ? parse_number(low.substr(k, e - k)) : std::nullopt;
  };
  std::optional<double> loss, val;
  for (size_t at = low.find("loss"); at != std::string::npos; at = low.find("loss", at + 4)) {
    auto v = number_at(at + 4);
    if (!v) continue;
    // "loss" alone, or the training/validation one ("train_loss", "Val Loss"); another model's or term's
    // ("act_loss", "critic_loss", "kl_loss") is not the curve
    size_t w = at;
    while (w > 0 && (low[w - 1] == ' ' || low[w - 1] == '_')) --w;
    size_t ws = w;
    while (ws > 0 && std::isalpha(static_cast<unsigned char>(low[ws - 1]))) --ws;
    const std::string word = low.substr(ws, w - ws);
    if (!word.empty() && word != "train" && word != "training" && word != "val" && word != "valid" &&
        word != "validation" && word != "test" && word != "eval" && word != "avg" && word != "mean" && word != "epoch")
      continue;
    const std::string before = low.substr(at >= 6 ? at - 6 : 0, at >= 6 ? 6 : at);
    const bool held_out = before.find("val") != std::string::npos || before.find("test") != std::string::npos ||
                          before.find("eval") != std::string::npos;
    if (held_out) {
      if (!val) val = v;
    } else if (!loss) {
      loss = v;
    }
  }
  if (!loss) return std::nullopt;
  Record r;
  r.step = iteration ? *iteration : *epoch;  // the finer counter is the step
  r.epoch = epoch;
  r.loss = loss;
  if (auto lr = low.find(" lr"); lr != std::string::npos) r.lr = number_at(lr + 3);
  r.eval_loss = val;
  return r;
}

// Python's traceback.print_exception layout: "Traceback (most recent call last):" at the margin, indented
// "  File ..." frames and source lines, then the exception at the margin: "KeyError: 8",
// "torch.OutOfMemoryError: CUDA out of memory. ...", "RuntimeError", "KeyboardInterrupt". A chained
// exception prints its cause first: the latest traceback's exception is the one that ended the program.
bool exception_line(std::string_view l) {
  size_t i = 0;
  while (i < l.size() && (std::isalnum(static_cast<unsigned char>(l[i])) || l[i] == '_' || l[i] == '.')) ++i;
  if (i == 0 || (i < l.size() && l[i] != ':')) return false;
  const std::string_view name = l.substr(0, i);
  const size_t dot = name.rfind('.');
  const std::string_view base = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (base.empty() || !std::isupper(static_cast<unsigned char>(base.front()))) return false;
  for (std::string_view end : {"Error", "Exception", "Interrupt", "Exit", "Failure", "Timeout"})
    if (name.size() >= end.size() && name.substr(name.size() - end.size()) == end) return true;
  return false;
}

bool traceback_line(TextLog& log, std::string_view raw) {
  ConsoleState& c = log.console;
  const std::string_view t = trim(raw);
  if (t == "Traceback (most recent call last):" && !raw.empty() && raw.front() == 'T') {
    c.in_traceback = true;
    return true;
  }
  if (!c.in_traceback || raw.empty() || raw.front() == ' ' || raw.front() == '\t' || !exception_line(t)) return false;
  c.in_traceback = false;  // its exception line; an "Original Traceback" inside the message is text
  c.exception = std::string(t.substr(0, kMaxDetail));
  c.exception_step = log.last_step();
  c.exception_t = log.t();
  return false;  // the line may also be a failure the readers know (CUDA out of memory, ...)
}

bool console_line(TextLog& log, std::string_view line) {
  ConsoleState& c = log.console;
  // A captured tqdm bar redraws with '\r' inside one line: each segment is a bar state or a print.
  std::string_view last = line;
  for (size_t p = line.find('\r'); p != std::string_view::npos; p = line.find('\r', p + 1)) {
    std::string_view seg = line.substr(line.size() - last.size(), p - (line.size() - last.size()));
    if (auto b = tqdm_step(seg)) on_bar(log, *b);
    else if (!trim(seg).empty()) console_line(log, seg);
    last = line.substr(p + 1);
  }
  std::string_view t = trim(last);
  if (t.empty()) return true;
  if (auto b = tqdm_step(t); b && t.find('{') == std::string_view::npos) {
    on_bar(log, *b);
    return true;
  }
  flush_dict(log, std::nullopt);
  if (root_cause(log, t)) return true;
  if (traceback_line(log, last)) return true;
  if (dist_failure(t)) {
    Record e;
    e.kind = RecordKind::event;
    e.name = event::error;
    e.detail = (log.line_rank() >= 0 ? fmt::format("rank {}: ", log.line_rank()) : std::string()) +
               std::string(t.substr(0, kMaxDetail));
    log.event(std::move(e));
    return true;
  }
  if (t.front() == '{' && t.back() == '}' && (has(t, "'loss'") || has(t, "'eval_loss'") || has(t, "\"loss\""))) {
    const auto kv = python_dict(t);
    Record r;
    r.t = log.t();
    bool any = false, eval = false, summary = false;
    std::optional<int64_t> step;
    for (const auto& [k, v] : kv) {
      if (k == "train_runtime" || k == "train_loss") summary = true;  // the end-of-training summary
      if (k.rfind("eval_", 0) == 0) eval = true;
      const Metric m = metric_for(k);
      auto x = parse_number(v);
      if (m == Metric::none) continue;
      if (!x) {
        if (log.warnings()) log.warnings()->push_back(fmt::format("{}: '{}': expected a number, got '{}'", log.where(), k, v));
        continue;
      }
      if (m == Metric::step) {
        if (std::isfinite(*x) && *x >= 0 && *x < 9e15) step = static_cast<int64_t>(*x);
      } else if (m == Metric::eval_loss) {
        r.eval_loss = x;
      } else {
        any |= set_metric(r, m, *x) && m != Metric::epoch;
      }
    }
    if (summary) {
      log.note_line("end");
      return true;
    }
    if (eval) {
      if (r.eval_loss) {
        r.kind = RecordKind::eval;
        log.event(std::move(r));
      }
      return true;
    }
    if (!any) return true;
    if (step || log.saw(Source::ds_progress)) {  // a framework's step lines place it: no need to wait
      if (step) r.step = *step;
      report_console(log, std::move(r));
    } else {
      c.dict = std::move(r);  // its step comes with the bar's redraw
    }
    return true;
  }
  // The PyTorch tutorial's print: "[2, 12000] loss: 1.247" (epoch, batch within the epoch).
  if (t.front() == '[' && has(t, "] loss: ")) {
    const size_t comma = t.find(','), close = t.find(']');
    auto ep = comma < close ? parse_integer(t.substr(1, comma - 1)) : std::nullopt;
    auto batch = comma < close ? parse_integer(t.substr(comma + 1, close - comma - 1)) : std::nullopt;
    auto loss = number_after(t, "] loss: ");
    if (ep && batch && loss && *ep >= 0 && *batch > 0) {
      if (*ep > c.last_epoch && c.last_epoch > 0) c.epoch_offset += c.last_batch;  // a new epoch
      if (*ep != c.last_epoch) c.last_batch = 0;
      c.last_epoch = *ep;
      c.last_batch = std::max(c.last_batch, *batch);
      Record r;
      r.step = c.epoch_offset + *batch;
      r.loss = loss;
      r.epoch = *ep;
      r.t = log.t();
      report_console(log, std::move(r));
      return true;
    }
  }
  // A script's per-epoch or per-iteration print: "Epoch 3: Train Loss 0.9674 | Val Loss 0.9665 | LR 5.00e-05",
  // "Epoch 1/100 - Train Loss: 4.0520, Val Loss: 3.2508", "epoch 7, loss = 0.31", "Iteration 12: loss=3.56",
  // "step 400 | loss 2.31": the iteration (or step) is the step, else the epoch.
  if (auto r = epoch_print(t)) {
    r->t = log.t();
    std::optional<double> val = r->eval_loss;
    r->eval_loss.reset();
    const int64_t step = r->step;
    const double t_line = r->t;
    report_console(log, std::move(*r));
    if (val) {
      Record e;
      e.kind = RecordKind::eval;
      e.step = step;
      e.t = t_line;
      e.eval_loss = val;
      log.event(std::move(e));
    }
    return true;
  }
  const std::string phase = phase_of(t);
  if (phase == "checkpoint" && std::isfinite(log.t())) {
    Record e;
    e.kind = RecordKind::event;
    e.name = event::checkpoint_save;
    log.event(std::move(e));
  }
  log.note_line(phase);
  return false;
}

}  // namespace flatline::readers
