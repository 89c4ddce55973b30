// TextLog (readers/text_log.h): assembling step records from text log lines, launcher prefixes,
// timestamps, PyTorch's distributed failure lines and the console prints of training scripts.
#include "readers/text_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "readers/metric_names.h"
#include "readers/text_util.h"

namespace flatline::readers {
namespace {

constexpr size_t kMaxDetail = 400;         // characters of a failure line kept as an event's detail
constexpr size_t kMergeBack = 64;          // emitted records searched for a late report of their step

bool has(std::string_view s, std::string_view x) { return contains(s, x); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// pdsh (DeepSpeed's multi-node launcher) prefixes every line with the host: "worker-0: ...".
// A host names a machine: letters, digits, '.', '_', '-', with a digit in it (or "localhost"), so a
// key like "steps: 100" is never mistaken for one.
std::string_view strip_host(std::string_view l) {
  size_t i = 0;
  while (i < l.size() && (std::isalnum(static_cast<unsigned char>(l[i])) || l[i] == '.' || l[i] == '_' || l[i] == '-'))
    ++i;
  if (i == 0 || i > 64 || i + 2 > l.size() || l[i] != ':' || l[i + 1] != ' ') return l;
  std::string_view host = l.substr(0, i);
  const bool digit = host.find_first_of("0123456789") != std::string_view::npos;
  const bool all_digits = host.find_first_not_of("0123456789") == std::string_view::npos;
  if (!std::isalpha(static_cast<unsigned char>(host[0])) || all_digits || (!digit && host != "localhost")) return l;
  return l.substr(i + 2);
}

// torchrun's per-rank prefixes: "[rank0]:" (--local-ranks-filter / log line prefix) and the older
// "[default0]:" (role + local rank).
std::string_view strip_torchrun(std::string_view l) {
  if (l.size() < 4 || l[0] != '[') return l;
  size_t close = find(l, "]:");
  if (close == std::string_view::npos || close > 24) return l;
  std::string_view tag = l.substr(1, close - 1);
  size_t d = tag.find_first_of("0123456789");
  if (d == 0 || d == std::string_view::npos || tag.substr(d).find_first_not_of("0123456789") != std::string_view::npos)
    return l;
  for (char c : tag.substr(0, d))
    if (!std::isalpha(static_cast<unsigned char>(c))) return l;
  return l.substr(close + 2);
}

int digits_at(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return -1;
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// "YYYY-MM-DD hh:mm:ss[,.]frac" at `s` (the body of parse_leading_timestamp, without brackets).
std::optional<double> bare_timestamp(std::string_view s) {
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T' && s[10] != '_')) return std::nullopt;
  std::string b = "[" + std::string(s.substr(0, std::min<size_t>(s.size(), 32)));
  b[11] = ' ';
  // close the bracket after the seconds and any fraction
  size_t end = 20;
  if (end < b.size() && (b[end] == ',' || b[end] == '.'))
    for (++end; end < b.size() && std::isdigit(static_cast<unsigned char>(b[end])); ++end) {
    }
  b = b.substr(0, end) + "]";
  return parse_leading_timestamp(b);
}

}  // namespace

std::optional<double> number_after(std::string_view s, std::string_view key) {
  auto p = find(s, key);
  if (p == std::string_view::npos) return std::nullopt;
  s.remove_prefix(p + key.size());
  while (!s.empty() && (s.front() == '[' || s.front() == '(' || s.front() == ' ')) s.remove_prefix(1);
  size_t e = s.find_first_of(", ])|");
  return parse_number(s.substr(0, e));
}

TextLog::TextLog(std::string name, Warnings* w) : name_(std::move(name)), w_(w) {}

std::string TextLog::where() const { return at_line(name_, line_no_); }

std::string_view TextLog::begin_line(size_t line_no, std::string_view line) {
  line_no_ = line_no;
  touched_ = -1;
  t_ = std::nan("");
  {  // the rank torchrun's --tee/--log-line-prefix tag names ("[rank3]: ", "[default3]: "), for failures
    const std::string_view host = strip_host(line), body = strip_torchrun(host);
    line_rank_ = -1;
    if (body.size() < host.size()) {  // strip_torchrun took "[<letters><digits>]: "
      const std::string_view tag = host.substr(1, host.find(']') - 1);
      if (auto r = parse_integer(tag.substr(tag.find_first_of("0123456789")))) line_rank_ = static_cast<int>(*r);
    }
    line = body;
  }
  std::optional<double> ts = parse_leading_timestamp(line);
  std::string_view body = trim(line);
  if (!ts) ts = bare_timestamp(body);  // Python logging's default "2024-01-01 12:00:00,123 - ..."
  if (!ts)
    if (auto p = find(line, "datetime: "); p != std::string_view::npos) ts = bare_timestamp(line.substr(p + 10));
  if (!ts)  // Slurm's slurmstepd: "*** JOB 123 ON node01 CANCELLED AT 2024-01-01T12:00:00 DUE TO TIME LIMIT ***"
    if (auto p = find(line, " CANCELLED AT "); p != std::string_view::npos) ts = bare_timestamp(line.substr(p + 14));
  if (!ts && year_ > 0 && body.size() > 21 && (body[0] == '[' || std::isupper(static_cast<unsigned char>(body[0])))) {
    // glog (c10's LOG(ERROR)): "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]" or "E1218 20:27:21.4264 ..."
    std::string_view g = body[0] == '[' ? body.substr(1) : body;
    const int mo = digits_at(g, 1, 2), dd = digits_at(g, 3, 2);
    if (std::string_view("IWEF").find(g[0]) != std::string_view::npos && mo >= 1 && mo <= 12 && dd >= 1 && g.size() > 14 &&
        g[5] == ' ')
      ts = bare_timestamp(fmt::format("{:04d}-{:02d}-{:02d} {}", year_, mo, dd, g.substr(6, 15)));
  }
  if (ts && any_reported_) {  // the trailing gap's own span, whatever clock the progress lines have
    if (!after_first_ts_) after_first_ts_ = ts;
    after_last_ts_ = ts;
  }
  if (ts && !clock_off_) {
    if (!first_ts_) first_ts_ = ts;
    latest_ts_ = ts;
    t_ = *ts;
    year_ = static_cast<int>(1970 + std::floor(*ts / 31556952.0));  // to within a day: enough for glog
  }
  return line;
}

double TextLog::elapsed_clock() {
  if (!anchor_) anchor_ = latest_ts_ ? *latest_ts_ : 0.0;
  return *anchor_ + elapsed_sum_;
}

void TextLog::note_line(const std::string& phase) {
  // The phase from any line (a log whose clock cannot place its lines still says what they were doing),
  // the time from a line on the clock.
  if (phase == "end") gap_phase_ = "end";
  else if (!phase.empty() && gap_phase_ != "end") gap_phase_ = phase;
  if (std::isfinite(t_)) last_line_t_ = std::isfinite(last_line_t_) ? std::max(last_line_t_, t_) : t_;
}

void TextLog::overflow(Overflow o) {
  // The fused optimizer prints one overflow as up to three lines, in order ("Grad overflow on
  // iteration", "Reducing dynamic loss scale from X to Y", "Overflow detected. Skipping step.
  // Attempted loss scale: X, reducing to Y"): a later stage merges into the open one.
  if (!overflows_.empty() && o.stage > 0 && overflows_.back().stage > 0 && overflows_.back().stage < o.stage &&
      !overflows_.back().min_error) {
    Overflow& b = overflows_.back();
    if (!b.attempted) b.attempted = o.attempted;
    if (!b.next) b.next = o.next;
    b.stage = o.stage;
    return;
  }
  overflows_.push_back(std::move(o));
}

namespace {

// A later report of the same step: the fields it has that the record lacks (the first writer's value
// wins, but a later writer's loss scale may where scale_wins).
void merge_fields(Record& r, const Record& f, bool scale_wins) {
  if (!r.lr) r.lr = f.lr;
  if (!r.loss) r.loss = f.loss;
  if (!r.grad_norm) r.grad_norm = f.grad_norm;
  if (!r.param_norm) r.param_norm = f.param_norm;
  if (!r.samples_seen) r.samples_seen = f.samples_seen;
  if (!r.opt_step) r.opt_step = f.opt_step;
  if (!r.step_ms) r.step_ms = f.step_ms;
  if (f.loss_scale && (scale_wins || !r.loss_scale)) r.loss_scale = f.loss_scale;
  if (!std::isfinite(r.t)) r.t = f.t;
  if (!r.epoch) r.epoch = f.epoch;
}

}  // namespace

void TextLog::report(Source src, Record fields, std::optional<int64_t> megatron_skipped) {
  const int s = static_cast<int>(src);
  const int64_t S = fields.step;
  touched_ = S;
  // the trailing-gap bookkeeping: progress resets it
  if (std::isfinite(fields.t)) {
    last_progress_t_ = fields.t;
    if (!first_progress_t_) first_progress_t_ = fields.t;
  }
  last_line_t_ = std::nan("");
  gap_phase_.clear();
  any_reported_ = true;
  if (!console.exception.empty() && S > console.exception_step) console.exception.clear();  // caught: the run went on
  after_first_ts_.reset();
  after_last_ts_.reset();
  auto last = last_by_src_.find(s);
  if (last != last_by_src_.end()) {
    if (S == last->second) {
      if (w_) w_->push_back(fmt::format("{}: duplicate step {} (rank 0), dropped", where(), S));
      return;
    }
    if (S < last->second) {
      if (w_)
        w_->push_back(fmt::format("{}: step {} after step {} (rank 0): out of order or a restart, kept", where(), S,
                                  last->second));
      close_through(INT64_MAX);  // what was pending belongs before the restart
    }
  }
  last_by_src_[s] = S;
  top_ = std::max(top_, s);
  // A step emitted already (a less detailed writer reported it first, before this one was known).
  if (pending_.find(S) == pending_.end() && any_closed_ && S <= last_closed_) {
    const size_t lo = ready_.size() > kMergeBack ? ready_.size() - kMergeBack : 0;
    for (size_t i = ready_.size(); i-- > lo;) {
      Record& r = ready_[i];
      if (r.kind != RecordKind::step || r.step != S || r.skipped.value_or(false)) continue;
      merge_fields(r, fields, /*scale_wins=*/false);
      if (fields.loss_scale) scale_ = fields.loss_scale;
      last_reported_ = std::max(last_reported_, S);
      return;
    }
  }
  close_through(S - 1);  // a report of a later step completes the earlier ones
  auto [it, fresh] = pending_.try_emplace(S);
  Pending& p = it->second;
  if (fresh) {
    p.rec = fields;
    p.line_no = line_no_;
    p.overflows = std::move(overflows_);
    overflows_.clear();
  } else {
    merge_fields(p.rec, fields, /*scale_wins=*/true);  // the most detailed writer's scale
  }
  if (src == Source::ds_progress) p.ds_total = ds_total_;
  if (megatron_skipped) p.meg_skipped = megatron_skipped;
  p.top = std::max(p.top, s);
  last_reported_ = std::max(last_reported_, S);
  if (s >= top_) close_through(S);
}

void TextLog::event(Record e) {
  // A distributed failure after the run's normal end (its last progress followed by "training
  // finished", HF's train_runtime summary, a launcher's "exits successfully"): the shutdown's noise
  // (the TCPStore's "recvValue failed ... Connection reset by peer" as the peers go), not a failure.
  if (e.name == "error" && gap_phase_ == "end") {
    if (!teardown_said_ && w_)
      w_->push_back(fmt::format("{}: '{}' after the run's normal end: read as shutdown noise, not a failure", where(),
                                e.detail.substr(0, 120)));
    teardown_said_ = true;
    return;
  }
  close_through(last_reported_);
  e.step = any_closed_ ? last_closed_ : 0;
  if (!std::isfinite(e.t)) e.t = std::isfinite(t_) ? t_ : std::nan("");
  if (e.name == "error") {
    if (std::find(seen_errors_.begin(), seen_errors_.end(), e.detail) != seen_errors_.end()) return;
    seen_errors_.push_back(e.detail);
  }
  ready_.push_back(std::move(e));
}

void TextLog::close_through(int64_t step) {
  while (!pending_.empty() && pending_.begin()->first <= step) {
    Pending p = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    emit(p);
  }
}

Record TextLog::applied(const Pending& p, int64_t step) {
  Record r = p.rec;
  r.kind = RecordKind::step;
  r.step = step;
  if (!r.loss_scale) r.loss_scale = scale_;
  r.skipped = false;
  r.overflow = false;
  applied_seen_ = true;
  return r;
}

void TextLog::emit_overflows(std::vector<Overflow>& ovs, int64_t first_step, std::optional<double> lr) {
  int64_t step = first_step;
  for (auto& o : ovs) {
    Record r;
    r.step = step++;
    r.t = o.t;
    r.lr = lr;
    r.skipped = true;
    r.overflow = true;
    r.loss_scale = o.attempted ? o.attempted : scale_;
    if (o.next) scale_ = o.next;
    ready_.push_back(r);
    if (o.min_error) {
      Record e;
      e.kind = RecordKind::event;
      e.step = r.step;
      e.t = o.t;
      e.name = "error";
      e.detail = o.text;
      ready_.push_back(std::move(e));
    }
  }
  if (!ovs.empty()) {
    last_closed_ = any_closed_ ? std::max(last_closed_, step - 1) : step - 1;
    any_closed_ = true;
  }
  ovs.clear();
}

void TextLog::once_per_overflow(std::vector<Overflow>& ovs, int64_t k, size_t line_no) {
  if (static_cast<int64_t>(ovs.size()) <= k) return;
  // Every rank prints the fused optimizer's "Grad overflow on iteration" and "Reducing dynamic loss
  // scale" lines (only log_dist's skip line is rank 0's alone): one overflow may be read as one group
  // per rank. The cumulative counter says how many steps were skipped: keep one of each distinct
  // overflow (attempted -> next), the latest k; a scaler at its floor repeats the same values, so
  // when fewer than k are distinct the latest k that name a scale are kept.
  auto same = [](const Overflow& a, const Overflow& b) {
    return a.attempted == b.attempted && a.next == b.next && a.min_error == b.min_error;
  };
  std::vector<Overflow> distinct, named;
  for (const Overflow& o : ovs) {
    if (!o.attempted && !o.next && !o.min_error) continue;  // a bare first line of another rank's copy
    named.push_back(o);
    if (std::none_of(distinct.begin(), distinct.end(), [&](const Overflow& d) { return same(d, o); })) distinct.push_back(o);
  }
  std::vector<Overflow>& keep = static_cast<int64_t>(distinct.size()) >= k ? distinct
                                : static_cast<int64_t>(named.size()) >= k  ? named
                                                                           : ovs;
  if (w_ && !copies_said_)
    w_->push_back(fmt::format("{}: {} overflow line groups for the {} skipped step(s) DeepSpeed's skipped= counts: "
                              "read once each (every rank prints them)",
                              at_line(name_, line_no), ovs.size(), k));
  copies_said_ = true;
  std::vector<Overflow> out(keep.end() - std::min<int64_t>(k, static_cast<int64_t>(keep.size())), keep.end());
  ovs = std::move(out);
}

void TextLog::emit(Pending& p) {
  const int64_t S = p.rec.step;
  // The interval (prev, S]: DeepSpeed counts global_steps from 0, so the first report covers (0, S].
  int64_t prev = any_closed_ && S > last_closed_ ? last_closed_ : 0;
  if (prev >= S) prev = S - 1;
  const int64_t n = S - prev;
  std::vector<Overflow>& ovs = p.overflows;
  // DeepSpeed's cumulative counter says how many were skipped when no overflow line did: the step's
  // record carries it as opt_step (step - skipped); which steps of the interval were skipped is not
  // logged, so no skipped records are made up for them.
  if (p.ds_total) {
    const int64_t rise = *p.ds_total - last_ds_total_.value_or(0);
    if (rise >= 1) once_per_overflow(ovs, rise, p.line_no);
    last_ds_total_ = p.ds_total;
  }
  const bool ds_known = !ovs.empty() || p.ds_total.has_value();
  if (!ds_known) {
    // One record for the line; Megatron's count marks it.
    Record r = p.rec;
    r.kind = RecordKind::step;
    if (p.meg_skipped) {
      r.overflow = *p.meg_skipped > 0;
      r.skipped = *p.meg_skipped > 0 && *p.meg_skipped >= n;
    }
    if (!r.skipped.value_or(false)) applied_seen_ = true;
    if (r.loss_scale) scale_ = r.loss_scale;
    ready_.push_back(std::move(r));
  } else {
    if (static_cast<int64_t>(ovs.size()) > n) {
      if (w_)
        w_->push_back(fmt::format("{}: {} overflow lines for the {} step(s) since step {}; the oldest are ignored", at_line(name_, p.line_no),
                                  ovs.size(), n, prev));
      ovs.erase(ovs.begin(), ovs.end() - n);
    }
    const int64_t m = static_cast<int64_t>(ovs.size());
    const std::optional<double> lr = p.rec.lr, after = p.rec.loss_scale;
    // The scale a line reports is the one after the interval's overflows: the applied record gets
    // the scale before them (where known).
    if (scale_) p.rec.loss_scale.reset();
    // Which steps of an interval overflowed is not logged: before the first applied step they are
    // placed first (the scaler's initial search), later last (a streak that lasts to the report).
    if (m < n) {
      if (!applied_seen_) {
        emit_overflows(ovs, prev + 1, lr);
        ready_.push_back(applied(p, S));
      } else {
        ready_.push_back(applied(p, S - m));
        emit_overflows(ovs, S - m + 1, lr);
      }
    } else {
      emit_overflows(ovs, prev + 1, lr);
    }
    if (after) scale_ = after;
    // The progress line's count on the interval's last record, whichever it is (an overflow at S).
    if (p.rec.opt_step)
      for (size_t i = ready_.size(); i-- > 0 && ready_[i].step >= S;)
        if (ready_[i].kind == RecordKind::step && ready_[i].step == S && !ready_[i].opt_step) ready_[i].opt_step = p.rec.opt_step;
  }
  last_closed_ = any_closed_ ? std::max(last_closed_, S) : S;
  any_closed_ = true;
}

void TextLog::drain(std::vector<Record>& out, bool final) {
  if (final) {
    close_through(INT64_MAX);
    if (!overflows_.empty()) emit_overflows(overflows_, (any_closed_ ? last_closed_ : 0) + 1, std::nullopt);
    if (!console.exception.empty() && gap_phase_ != "end") {
      // The log's last exception, and no step after it: the program ended on it.
      Record e;
      e.kind = RecordKind::event;
      e.name = "error";
      e.t = console.exception_t;
      e.detail = "uncaught exception, the process ended: " + console.exception;
      std::string ex = std::move(console.exception);
      console.exception.clear();
      if (std::none_of(seen_errors_.begin(), seen_errors_.end(), [&](const std::string& d) { return d.find(ex) != std::string::npos; }))
        event(std::move(e));
    }
    // The run's normal end as its last word ("training finished", "exits successfully", ...): a run_end.
    if (gap_phase_ == "end" && any_closed_) {
      Record e;
      e.kind = RecordKind::event;
      e.name = "run_end";
      e.step = last_closed_;
      e.t = std::isfinite(last_line_t_) ? last_line_t_ : std::nan("");
      ready_.push_back(std::move(e));
    }
    // A later timestamped line after the last progress: the process was still writing and not stepping.
    double hb_t = std::nan("");
    if (gap_phase_ != "end") {
      if (std::isfinite(last_line_t_) && std::isfinite(last_progress_t_) && last_line_t_ > last_progress_t_) {
        hb_t = last_line_t_;
      } else if ((clock_off_ || !std::isfinite(last_progress_t_)) && after_first_ts_ && *after_last_ts_ > *after_first_ts_ &&
                 any_closed_) {
        // The progress lines cannot be placed on the later lines' clock (they carry none, or the origin
        // was fixed before any timestamp): the span of the timestamped lines after the last progress is
        // a lower bound of how long no step came. Placed after the last step record's own time.
        double base = last_step_raw_t_;
        for (const Record& r : ready_)
          if (r.kind == RecordKind::step && std::isfinite(r.t)) base = r.t;
        const double span = *after_last_ts_ - *after_first_ts_;
        hb_t = base + span;
        if (std::isfinite(base) && w_)
          w_->push_back(fmt::format("{}: timestamped lines for {:.0f} s after the last step ({}) and no step among them; "
                                    "the step lines carry no clock of their own, so that is a lower bound",
                                    name_, span, last_closed_));
      }
    }
    if (std::isfinite(hb_t)) {
      Record h;
      h.kind = RecordKind::heartbeat;
      h.step = (any_closed_ ? last_closed_ : 0) + 1;
      h.t = hb_t;
      h.phase = gap_phase_;
      ready_.push_back(std::move(h));
    }
  }
  // Hold back the trailing records of the step this line reported (see the header).
  size_t n = ready_.size();
  if (!final && touched_ >= 0 && top_ < static_cast<int>(Source::megatron))  // Megatron's line comes last
    while (n > 0 && ready_[n - 1].step == touched_) --n;
  if (n == 0) return;
  if (!origin_) {
    // The first progress line's time; before any, the first timestamp; without a clock, 0 (t is
    // then Megatron's running sum, or unknown) and later timestamps cannot be placed on it.
    origin_ = first_progress_t_ && first_ts_ ? *first_progress_t_ : first_ts_ ? *first_ts_ : 0.0;
    if (!first_ts_) clock_off_ = true;
  }
  for (size_t i = 0; i < n; ++i) {
    Record& r = ready_[i];
    if (r.kind == RecordKind::step && std::isfinite(r.t)) last_step_raw_t_ = r.t;
    if (std::isfinite(r.t)) r.t -= *origin_;
    out.push_back(std::move(r));
  }
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<long>(n));
}

// --- PyTorch's distributed failure lines and the console prints of training scripts ----------------

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
    e.name = "error";
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
  e.name = "error";
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
    e.name = "error";
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
    e.name = "checkpoint_save";
    log.event(std::move(e));
  }
  log.note_line(phase);
  return false;
}

namespace {

class TextLines : public LineParser {
 public:
  TextLines(const std::string& name, Warnings* w) : log_(name, w) {}
  void line(size_t line_no, std::string_view line, std::vector<Record>& out) override {
    std::string_view l = log_.begin_line(line_no, line);
    console_before(log_, l);
    if (!megatron_line(log_, l) && !deepspeed_line(log_, l)) console_line(log_, l);
    log_.drain(out, false);
  }
  void finish(std::vector<Record>& out) override {
    console_end(log_);
    log_.drain(out, true);
  }
  void idle(std::vector<Record>& out) override { log_.release(out); }

 private:
  TextLog log_;
};

}  // namespace

std::unique_ptr<LineParser> text_lines(const std::string& name, Warnings* w) {
  return std::make_unique<TextLines>(name, w);
}

std::vector<Record> parse_text_log(std::string_view data, const std::string& name, Warnings* w) {
  TextLines p(name, w);
  return parse_lines(p, data, name, w);
}

}  // namespace flatline::readers
