// TextLog (readers/text_log.h): assembling step records from text log lines, launcher prefixes and
// timestamps. The lines any training console prints (distributed failures, script prints): console_lines.cpp.
#include "readers/text_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "readers/metric_names.h"
#include "readers/text_util.h"

namespace flatline::readers {
namespace {

constexpr size_t kMergeBack = 64;          // emitted records searched for a late report of their step

bool has(std::string_view s, std::string_view x) { return contains(s, x); }

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
  if (e.name == event::error && gap_phase_ == "end") {
    if (!teardown_said_ && w_)
      w_->push_back(fmt::format("{}: '{}' after the run's normal end: read as shutdown noise, not a failure", where(),
                                e.detail.substr(0, 120)));
    teardown_said_ = true;
    return;
  }
  close_through(last_reported_);
  e.step = any_closed_ ? last_closed_ : 0;
  if (!std::isfinite(e.t)) e.t = std::isfinite(t_) ? t_ : std::nan("");
  if (e.name == event::error) {
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
      e.name = event::error;
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
      e.name = event::error;
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
      e.name = event::run_end;
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
