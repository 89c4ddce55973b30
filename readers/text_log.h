// Text training logs (console output): what the Megatron-LM, DeepSpeed and console readers share.
// One log interleaves lines of several writers: Megatron's training_log, DeepSpeed's engine and loss
// scaler, the user's own prints (HF Trainer's log dicts), PyTorch's distributed errors, launchers'
// prefixes. megatron.cpp and deepspeed.cpp know their writers' lines (megatron_line, deepspeed_line);
// console_lines.cpp the lines any training console has (console_line: script prints, distributed
// failures), and text_log.cpp launcher prefixes and timestamps. Every text reader tries all of them on every line, so a
// Megatron-DeepSpeed log is read whole whichever reader was chosen; the three readers (megatron,
// deepspeed, console) differ in what they are detected by.
//
// TextLog assembles the facts of those lines into step records, in file order:
//  - a step is reported by one or more lines (DeepSpeed's step=S, its pipeline engine's
//    "steps: S loss: X", Megatron's "iteration S/ N |...", a console loss print); their fields are
//    merged into one record for S, emitted once a line of the most detailed writer seen so far
//    reports S, or a later step is reported, or the log ends;
//  - skipped steps: DeepSpeed's overflow lines and its cumulative skipped= counter (the true count:
//    Megatron-DeepSpeed's pipeline path prints "number of skipped iterations: 0" whatever happened,
//    Megatron-DeepSpeed megatron/training.py train_step, "skipped_iter = 0" under
//    args.deepspeed and pipeline parallelism): each overflow line is one skipped record inside the
//    interval, and the counter is the progress record's opt_step (step - skipped); without them
//    Megatron's per-interval count marks the interval's one record;
//  - time: from the absolute timestamps of any line (DeepSpeed's logger, Megatron's core_r0.8 prefix
//    and "[...] datetime:" lines, glog, Python logging); a Megatron line without one is placed at the
//    last timestamped line plus the running sum of elapsed time per iteration. t = seconds since the
//    first progress line (the first timestamp when the log has none there); without any timestamp,
//    the running sum alone;
//  - PyTorch's distributed failures (NCCL watchdog timeouts, Gloo timeouts and closed connections,
//    c10d store timeouts, torch.distributed.elastic failure summaries) become `error` events, and a
//    later timestamped line after the last progress, with no checkpoint, eval or normal end in
//    between, a heartbeat at its time: both are run_not_alive evidence.
// Rank 0 (the rank that prints), except for a failure line that names another rank (detail only).
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "readers/reader.h"

namespace flatline::readers {

// The writers of step reports, least to most detailed.
enum class Source { console = 0, ds_progress = 1, ds_pipe = 2, megatron = 3 };

// One DeepSpeed loss-scaler overflow (deepspeed/runtime/fp16/loss_scaler.py update_scale,
// fp16/fused_optimizer.py step and _update_scale).
struct Overflow {
  std::optional<double> attempted, next;
  double t = std::nan("");
  bool min_error = false;  // "Current loss scale already at minimum": the run exits
  std::string text;        // the error's text (min_error)
  int stage = 0;           // 1 "Grad overflow on iteration", 2 "Reducing dynamic loss scale", 3 the skip line
};

// What console_line keeps between lines.
struct ConsoleState {
  std::optional<int64_t> bar;                                // the step a tqdm bar last showed
  int64_t epoch_offset = 0, last_epoch = 0, last_batch = 0;  // "[epoch, batch] loss:" prints
  bool in_root_cause = false;                                // inside elastic's failure summary
  std::optional<Record> dict;  // a printed log dict waiting for the tqdm redraw that names its step
  std::string rc_rank, rc_exit, rc_trace;
  // A Python traceback ("Traceback (most recent call last):", frames, then "SomeError: message"): the
  // exception line of the latest one, and the step reported before it. No later step: the process died
  // of it (drain(final) makes it an error event); a later step: it was caught and the run went on.
  bool in_traceback = false;
  std::string exception;
  int64_t exception_step = -1;
  double exception_t = std::nan("");
};

class TextLog {
 public:
  TextLog(std::string name, Warnings* w);

  // Per line, before the readers look at it: strips launcher prefixes (pdsh's "worker-0: ",
  // torchrun's "[rank0]:" / "[default0]:"), reads its timestamp. Returns the rest of the line.
  std::string_view begin_line(size_t line_no, std::string_view line);
  std::string where() const;  // "file:line" of the current line (made on demand: most lines never warn)
  // This line's time on the log's clock (NaN when it has none); records carry it, and drain() makes
  // it relative to the origin.
  double t() const { return t_; }
  // For a line without a timestamp that knows its elapsed time (Megatron): the last timestamped
  // line's time plus the running sum of elapsed().
  double elapsed_clock();

  // A report of step S from `src`: the fields it carried (step, lr, loss, loss_scale, grad_norm,
  // param_norm, samples_seen, step_ms, t, ...). Megatron's interval count, when known, in megatron_skipped.
  void report(Source src, Record fields, std::optional<int64_t> megatron_skipped = std::nullopt);
  // DeepSpeed's cumulative skipped= counter as of step S's report (call before report()).
  void skipped_total(int64_t total) { ds_total_ = total; }
  void overflow(Overflow o);
  // An event (error, checkpoint_save, ...) or eval record at the current position.
  void event(Record e);
  // A timestamped line that is not progress: its phase hint ("checkpoint", "eval", "end" for a
  // normal end of training, "" otherwise), for the trailing-gap heartbeat.
  void note_line(const std::string& phase);
  // The next step a step-less print describes (after the last reported one).
  int64_t next_step() const { return last_reported_ + 1; }
  int64_t last_step() const { return last_reported_; }
  bool saw(Source s) const { return top_ >= static_cast<int>(s); }
  // The last step `s` reported (0 before its first report).
  int64_t last_of(Source s) const {
    auto it = last_by_src_.find(static_cast<int>(s));
    return it == last_by_src_.end() ? 0 : it->second;
  }
  ConsoleState console;
  // Megatron's elapsed time per iteration, for t when the log has no timestamps.
  void elapsed(double seconds) { elapsed_sum_ += seconds; }

  // Moves the records completed so far to `out`; final: the log ended (flushes everything). The
  // records of the step the current line reported stay until the next line: the writers of one
  // iteration print one after another (DeepSpeed's step line, its pipeline loss, Megatron's line,
  // the script's dict), and a later one may still add to them; once a Megatron line has been seen,
  // its line (the most detailed, printed last) completes the step and nothing is held.
  void drain(std::vector<Record>& out, bool final);
  // The log is quiet: hand out what drain() held back for the current line's step.
  void release(std::vector<Record>& out) {
    touched_ = -1;
    drain(out, false);
  }

  Warnings* warnings() const { return w_; }
  int line_rank() const { return line_rank_; }  // the rank the current line's torchrun prefix names, or -1

 private:
  struct Pending {
    Record rec;
    int top = -1;  // most detailed source that reported it
    std::optional<int64_t> ds_total, meg_skipped;
    std::vector<Overflow> overflows;  // printed before this step's first report, after the previous one
    size_t line_no = 0;               // of its first report
  };
  void close_through(int64_t step);
  void emit(Pending& p);
  void emit_overflows(std::vector<Overflow>& ovs, int64_t first_step, std::optional<double> lr);
  // At most k overflows for an interval DeepSpeed's skipped= counter says had k skipped steps.
  void once_per_overflow(std::vector<Overflow>& ovs, int64_t k, size_t line_no);
  Record applied(const Pending& p, int64_t step);

  std::string name_;
  size_t line_no_ = 0;
  Warnings* w_;
  double t_ = std::nan("");
  std::optional<double> first_ts_, latest_ts_, first_progress_t_, origin_, anchor_;
  bool clock_off_ = false;  // the origin was fixed without a clock: later timestamps cannot be placed
  int year_ = 0;            // of the last full timestamp (glog lines have none)
  double elapsed_sum_ = 0;
  std::map<int64_t, Pending> pending_;
  std::vector<Overflow> overflows_;
  std::vector<Record> ready_;
  std::optional<int64_t> ds_total_, last_ds_total_;
  std::map<int, int64_t> last_by_src_;
  std::optional<double> scale_;
  int top_ = -1;
  int64_t last_reported_ = 0, last_closed_ = 0, touched_ = -1;  // touched_: the step this line reported
  bool applied_seen_ = false, any_closed_ = false, copies_said_ = false;
  // trailing gap
  double last_progress_t_ = std::nan(""), last_line_t_ = std::nan("");
  // the timestamps of the lines after the last progress (raw, on their own clock), and the raw t of the
  // last step record handed out
  std::optional<double> after_first_ts_, after_last_ts_;
  double last_step_raw_t_ = std::nan("");
  bool any_reported_ = false;
  std::string gap_phase_;
  bool teardown_said_ = false;
  int line_rank_ = -1;  // a distributed failure after the normal end was warned of
  std::vector<std::string> seen_errors_;
};

// The line kinds of each reader file; each returns true when the line was its own.
bool megatron_line(TextLog& log, std::string_view line);
bool deepspeed_line(TextLog& log, std::string_view line);
bool console_line(TextLog& log, std::string_view line);
// The end of the log for console_line (a log dict still waiting for its step), and the start of
// every line (a dict waits only for a bar drawn right after it).
void console_end(TextLog& log);
void console_before(TextLog& log, std::string_view line);

// The `error` event of one console line that is a PyTorch distributed failure (a line captured by
// another log: W&B's OutputRecord); nullopt for any other line. No step or t set.
std::optional<Record> failure_event(std::string_view line);

// A LineParser over every line kind, for the three text readers.
std::unique_ptr<LineParser> text_lines(const std::string& name, Warnings* w);
std::vector<Record> parse_text_log(std::string_view data, const std::string& name, Warnings* w);

// Sniffer helpers: do the first bytes hold lines of that writer?
bool has_megatron_lines(std::string_view head);
bool has_deepspeed_lines(std::string_view head);

// Launcher prefixes, stripped: pdsh's host ("worker-0: ...", DeepSpeed's multi-node launcher) and
// torchrun's rank tags ("[rank0]:", the older "[default0]:").
std::string_view strip_host(std::string_view line);
std::string_view strip_torchrun(std::string_view line);
constexpr size_t kMaxDetail = 400;  // characters of a failure line kept as an event's detail

// Shared number scanning: the number after `key` in `s` (skipping '[', '(' and spaces; up to the next
// ',', ' ', ']' or ')'), e.g. number_after("skipped=3, lr=[0.1]", "lr=") -> 0.1.
std::optional<double> number_after(std::string_view s, std::string_view key);

}  // namespace flatline::readers
