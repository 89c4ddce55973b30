// DeepSpeed logs (deepspeed/runtime/engine.py _report_progress, runtime/fp16/loss_scaler.py
// DynamicLossScaler.update_scale, runtime/pipe/engine.py), mixed with any other lines:
//   [2024-01-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=3, lr=[0.0003], mom=[(0.9, 0.999)]
//   [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768
//   [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1
//   Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.
//   steps: 100 loss: 2.3456 iter time (s): 0.412 samples/sec: 155.3          (pipeline engine)
// "step=S" is printed every steps_per_print steps (S counts skipped steps too); an OVERFLOW line is
// one skipped step, printed before the step line of its interval. Steps are rebuilt per interval
// (S_prev, S] holding m overflow lines: one applied record at step S - m (lr, loss scale so far) and
// m skipped records (overflow, skipped, loss_scale = the attempted scale). Which steps of an interval
// overflowed is not logged: before the first applied step they are placed first (the scaler's initial
// search), later they are placed last (a streak that lasts to the report). Without overflow lines, a
// rise in the cumulative "skipped=" count gives that many skipped records (scale unknown). The
// minimum-scale error is one more skipped step plus an `error` event. Rank 0; t from the timestamps.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "readers/reader.h"
#include "readers/text_util.h"

namespace flatline {
namespace {
using readers::at_line;

constexpr int64_t kMaxSynthetic = 100000;  // skipped steps rebuilt from one rise of the skipped= counter

struct Overflow {
  std::optional<double> attempted, next;
  double t = std::nan("");
  bool min_error = false;
  std::string where, text;
};

// The number after `key` in `s` (up to the next ',', ' ' or ']'), e.g. "skipped=" -> 3.
std::optional<double> number_after(std::string_view s, std::string_view key) {
  auto p = s.find(key);
  if (p == std::string_view::npos) return std::nullopt;
  s.remove_prefix(p + key.size());
  while (!s.empty() && (s.front() == '[' || s.front() == ' ')) s.remove_prefix(1);
  size_t e = s.find_first_of(", ]");
  return readers::parse_number(s.substr(0, e));
}

class Rebuild {
 public:
  Rebuild(const std::string& name, Warnings* w) : name_(name), w_(w) {}
  std::vector<Record> out;

  void overflow(Overflow o) { pending_.push_back(std::move(o)); }

  // A step report: step S done, with whatever the line carried.
  void report(int64_t S, std::optional<int64_t> skipped_total, std::optional<double> lr, std::optional<double> loss,
              double t, const std::string& where) {
    if (S == last_step_ && pending_.empty()) {  // a second report of the same step: merge
      for (auto it = out.rbegin(); it != out.rend() && it->step == S; ++it)
        if (it->kind == RecordKind::step) {
          if (!it->lr) it->lr = lr;
          if (!it->loss && !it->skipped.value_or(false)) it->loss = loss;
        }
      if (skipped_total) skipped_ = *skipped_total;
      return;
    }
    if (last_step_ >= 0 && S < last_step_ && w_)
      w_->push_back(fmt::format("{}: step {} after step {}: out of order or a restart, kept", where, S, last_step_));
    // The interval (prev, S]: DeepSpeed counts global_steps from 0, so the first report covers (0, S].
    int64_t prev = last_step_ >= 0 && S > last_step_ ? last_step_ : 0;
    if (prev >= S) prev = S - 1;
    const int64_t n = S - prev;
    if (pending_.empty() && skipped_total && skipped_ >= 0 && *skipped_total > skipped_) {
      int64_t k = std::min(*skipped_total - skipped_, n);
      if (k > kMaxSynthetic) {  // a corrupt counter must not make millions of records
        if (w_) w_->push_back(fmt::format("{}: skipped= rose by {}; only {} skipped steps rebuilt", where, k, kMaxSynthetic));
        k = kMaxSynthetic;
      }
      for (int64_t i = 0; i < k; ++i) pending_.push_back(Overflow{{}, {}, t, false, where, ""});
    }
    if (static_cast<int64_t>(pending_.size()) > n) {
      if (w_) w_->push_back(fmt::format("{}: {} overflow lines for the {} step(s) since step {}; the oldest are ignored",
                                        where, pending_.size(), n, prev));
      pending_.erase(pending_.begin(), pending_.end() - n);
    }
    const int64_t m = static_cast<int64_t>(pending_.size());
    const bool first = !applied_seen_;
    if (m < n) {  // the applied step(s) of the interval, as one record
      if (first) {
        emit_overflows(prev + 1, lr);
        out.push_back(applied(S, lr, loss, t));
      } else {
        out.push_back(applied(S - m, lr, loss, t));
        emit_overflows(S - m + 1, lr);
      }
    } else {
      emit_overflows(prev + 1, lr);
    }
    last_step_ = S;
    if (skipped_total) skipped_ = *skipped_total;
  }

  void finish() {
    if (!pending_.empty()) emit_overflows(last_step_ + 1, std::nullopt);
  }

 private:
  Record applied(int64_t step, std::optional<double> lr, std::optional<double> loss, double t) {
    Record r;
    r.step = step;
    r.t = t;
    r.lr = lr;
    r.loss = loss;
    r.loss_scale = scale_;
    r.skipped = false;
    r.overflow = false;
    applied_seen_ = true;
    return r;
  }
  void emit_overflows(int64_t first_step, std::optional<double> lr) {
    int64_t step = first_step;
    for (auto& o : pending_) {
      Record r;
      r.step = step++;
      r.t = o.t;
      r.lr = lr;
      r.skipped = true;
      r.overflow = true;
      r.loss_scale = o.attempted ? o.attempted : scale_;
      if (o.next) scale_ = o.next;
      if (o.min_error) {
        Record e;
        e.kind = RecordKind::event;
        e.step = r.step;
        e.t = o.t;
        e.name = "error";
        e.detail = o.text;
        out.push_back(std::move(r));
        out.push_back(std::move(e));
      } else {
        out.push_back(std::move(r));
      }
    }
    if (!pending_.empty()) last_step_ = std::max(last_step_, step - 1);
    pending_.clear();
  }

  std::string name_;
  Warnings* w_;
  std::vector<Overflow> pending_;
  std::optional<double> scale_;
  int64_t last_step_ = -1, skipped_ = -1;
  bool applied_seen_ = false;
};

}  // namespace

std::vector<Record> parse_deepspeed_log(std::string_view data, const std::string& name, Warnings* w) {
  Rebuild rb(name, w);
  std::optional<double> t0;
  readers::for_each_line(data, name, w, [&](size_t line_no, std::string_view line) {
    const std::string where = at_line(name, line_no);
    double t = std::nan("");
    if (auto ts = readers::parse_leading_timestamp(line)) {
      if (!t0) t0 = ts;
      t = *ts - *t0;
    }
    if (line.find("OVERFLOW!") != std::string_view::npos || line.find("Overflow detected") != std::string_view::npos) {
      Overflow o;
      o.t = t;
      o.where = where;
      o.attempted = number_after(line, "Attempted loss scale:");
      if (line.find("reducing to") != std::string_view::npos) {
        o.next = number_after(line, "reducing to");
        if (!o.next && w) w->push_back(where + ": unreadable scale after 'reducing to'");
      }
      rb.overflow(std::move(o));
    } else if (line.find("loss scale already at minimum") != std::string_view::npos) {
      Overflow o;
      o.t = t;
      o.where = where;
      o.min_error = true;
      o.text = std::string(readers::trim(line.substr(line.find("Current loss scale") == std::string_view::npos
                                                         ? 0
                                                         : line.find("Current loss scale"))));
      rb.overflow(std::move(o));
    } else if (line.find("step=") != std::string_view::npos && line.find("skipped=") != std::string_view::npos) {
      auto s = number_after(line, "step=");
      auto k = number_after(line, "skipped=");
      auto lr = number_after(line, "lr=");
      if (!s || !std::isfinite(*s) || *s < 0 || *s > 9e15) {
        if (w) w->push_back(where + ": DeepSpeed progress line without a readable step=, skipped");
        return;
      }
      if (!lr && line.find("lr=") != std::string_view::npos && w) w->push_back(where + ": unreadable lr=");
      std::optional<int64_t> kk;
      if (k && std::isfinite(*k) && *k >= 0 && *k < 9e15) kk = static_cast<int64_t>(*k);
      rb.report(static_cast<int64_t>(*s), kk, lr, std::nullopt, t, where);
    } else if (line.find("steps: ") != std::string_view::npos && line.find(" loss: ") != std::string_view::npos) {
      auto s = number_after(line, "steps: ");
      auto loss = number_after(line, " loss: ");
      if (!s || !std::isfinite(*s) || *s < 0 || *s > 9e15) return;
      if (!loss && w) w->push_back(where + ": unreadable loss");
      rb.report(static_cast<int64_t>(*s), std::nullopt, std::nullopt, loss, t, where);
    }
  });
  rb.finish();
  return std::move(rb.out);
}

}  // namespace flatline
