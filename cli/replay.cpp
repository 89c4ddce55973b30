// Replay of recorded telemetry through the Triage (cli/replay.h).
#include "cli/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace flatline {
namespace {

// The replay loop, fed record by record. The checklist is polled on step records (and at the end):
// the state a person would see live. Polling costs a diagnosis (the plateau check is linear in the
// steps seen), so a long log is polled every stride-th step record: stride = steps / 5000 when the
// total is known, else steps seen so far / 5000 (1 for the first 10,000 steps either way).
class Player {
 public:
  Player(int world_size, const LogFacts& facts, const ReplayOptions& o, int64_t known_steps)
      : o_(o), known_steps_(known_steps) {
    DetectorConfig cfg;
    cfg.world_size = world_size;
    cfg.planned_steps = facts.planned_steps;
    cfg.log_complete = true;  // a recorded log, read to its end (a followed one is not: readers/follow.h)
    tri_ = std::make_unique<Triage>(cfg);
    if (o.on_finding) tri_->on_finding(o.on_finding);
    speed_ = o.speed > 0 && std::isfinite(o.speed) ? o.speed : 1.0;
  }

  void observe(const Record& r) {
    if (o_.realtime && std::isfinite(r.t)) {
      if (std::isfinite(prev_t_) && r.t > prev_t_) {
        const double dt = (r.t - prev_t_) / speed_;
        if (o_.sleep) o_.sleep(dt);
        else std::this_thread::sleep_for(std::chrono::duration<double>(dt));
      }
      prev_t_ = r.t;
    }
    tri_->observe(r);
    if (std::isfinite(r.t)) last_t_ = std::max(last_t_, r.t);
    if (r.kind != RecordKind::step) return;
    last_step_ = r.step;
    ++seen_steps_;
    const int64_t stride = known_steps_ >= 0 ? std::max<int64_t>(1, known_steps_ / 5000)
                                             : std::max<int64_t>(1, seen_steps_ / 5000);
    if (seen_steps_ % stride == 0) report_checks(r.step);
  }

  Diagnosis finish() {
    tri_->finish(last_t_);
    report_checks(last_step_);
    return tri_->diagnosis();
  }

 private:
  void report_checks(int64_t step) {
    if (!o_.on_check) return;
    Diagnosis d = tri_->diagnosis();
    states_.resize(d.checklist.size(), CheckState::pending);
    for (size_t i = 0; i < d.checklist.size(); ++i)
      if (d.checklist[i].state != states_[i]) {
        states_[i] = d.checklist[i].state;
        o_.on_check(d.checklist[i], step);
      }
  }

  const ReplayOptions& o_;
  std::unique_ptr<Triage> tri_;
  std::vector<CheckState> states_;
  double speed_ = 1, last_t_ = 0, prev_t_ = NAN;
  int64_t last_step_ = -1, seen_steps_ = 0, known_steps_;
};

}  // namespace

Diagnosis replay(const LogData& log, const ReplayOptions& o) {
  int64_t n_steps = 0;
  for (const Record& r : log.records) n_steps += r.kind == RecordKind::step;
  Player p(log.world_size, log.facts, o, n_steps);
  for (const Record& r : log.records) p.observe(r);
  return p.finish();
}

Diagnosis replay(LogStream& log, const ReplayOptions& o) {
  Player p(log.world_size(), log.facts(), o, -1);
  std::vector<Record> batch;
  while (log.next(batch))
    for (const Record& r : batch) p.observe(r);
  return p.finish();
}

Diagnosis diagnose_log(const std::string& path, const std::string& format, Warnings* warnings) {
  LogStream log(path, format);
  Diagnosis d = replay(log);
  if (warnings) warnings->insert(warnings->end(), log.warnings().begin(), log.warnings().end());
  return d;
}

}  // namespace flatline
