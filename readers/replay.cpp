// Replay of recorded telemetry through the Triage (readers/replay.h).
#include "readers/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace flatline {

Diagnosis replay(const LogData& log, const ReplayOptions& o) {
  DetectorConfig cfg;
  cfg.world_size = log.world_size;
  Triage tri(cfg);
  if (o.on_finding) tri.on_finding(o.on_finding);
  std::vector<CheckState> states;
  auto report_checks = [&](int64_t step) {
    if (!o.on_check) return;
    Diagnosis d = tri.diagnosis();
    states.resize(d.checklist.size(), CheckState::pending);
    for (size_t i = 0; i < d.checklist.size(); ++i)
      if (d.checklist[i].state != states[i]) {
        states[i] = d.checklist[i].state;
        o.on_check(d.checklist[i], step);
      }
  };
  const double speed = o.speed > 0 && std::isfinite(o.speed) ? o.speed : 1.0;
  double last_t = 0, prev_t = NAN;
  int64_t last_step = -1, n_steps = 0, seen_steps = 0;
  for (const Record& r : log.records) n_steps += r.kind == RecordKind::step;
  // Polling the checklist costs a diagnosis (the plateau check is linear in the steps seen): on long
  // logs, poll every stride-th step record so a replay stays linear-ish.
  const int64_t stride = std::max<int64_t>(1, n_steps / 5000);
  for (const Record& r : log.records) {
    if (o.realtime && std::isfinite(r.t)) {
      if (std::isfinite(prev_t) && r.t > prev_t) {
        const double dt = (r.t - prev_t) / speed;
        if (o.sleep) o.sleep(dt);
        else std::this_thread::sleep_for(std::chrono::duration<double>(dt));
      }
      prev_t = r.t;
    }
    tri.observe(r);
    if (std::isfinite(r.t)) last_t = std::max(last_t, r.t);
    if (r.kind == RecordKind::step) last_step = r.step;
    // The checklist is polled on step records (and at the end): the state a person would see live.
    if (r.kind == RecordKind::step && ++seen_steps % stride == 0) report_checks(r.step);
  }
  tri.finish(last_t);
  report_checks(last_step);
  return tri.diagnosis();
}

Diagnosis diagnose_log(const std::string& path, const std::string& format, Warnings* warnings) {
  LogData log = read_log(path, format);
  if (warnings) warnings->insert(warnings->end(), log.warnings.begin(), log.warnings.end());
  return replay(log);
}

}  // namespace flatline
