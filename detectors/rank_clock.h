// RankClock: run_not_alive's bookkeeping for one rank in wall-clock time: its step records (last
// step, median interval), its watchdog heartbeats (interval, phase history), its pauses
// (checkpoint / eval) and restarts, and the stale-logging counter. The rules and their thresholds
// are documented in run_not_alive.cpp; this file only keeps the state they read.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>
#include <optional>
#include <string>

#include "detectors/util.h"
#include "telemetry/block.h"
#include "telemetry/record.h"

namespace flatline::detail {

// The watchdog's phases as small ids (PhaseId, known_phase, kPhaseNames): telemetry/block.h.
inline bool pause_phase(uint8_t id) { return id == kPhaseCheckpoint || id == kPhaseEval; }
inline bool training_phase(uint8_t id) { return id <= kPhaseOptimizer; }
inline double later(double a, double b) { return !std::isfinite(a) ? b : !std::isfinite(b) ? a : std::max(a, b); }

struct RankClock {
  static constexpr double kDefaultHeartbeat = 0.5;  // s, until two heartbeats are seen
  static constexpr double kDeadGap = 2.0;           // s: a heartbeat gap this long and
  static constexpr double kDeadBeats = 4.0;         //    this many intervals: a new process
  // Heartbeats kept for the evidence line: kPhaseBudget over all ranks, between kMinPhaseHistory and
  // kMaxPhaseHistory per rank (4096 at 1024 ranks, 256 at 16,384: 9 bytes each, 37 MB).
  static constexpr size_t kPhaseBudget = size_t{1} << 22, kMinPhaseHistory = 64, kMaxPhaseHistory = 4096;
  static size_t phase_history(int world) {
    const size_t per = world > 0 ? kPhaseBudget / static_cast<size_t>(world) : kMaxPhaseHistory;
    return std::clamp(per, kMinPhaseHistory, kMaxPhaseHistory);
  }

  int64_t last_step = 0, step_records = 0, since_start = 0;  // since_start: step records since a (re)start
  double first_step_s = std::nan("");  // the (re)start to its first step record: how long a step took at most
  double last_step_t = std::nan(""), first_t = std::nan(""), latest_t = std::nan("");
  Ring step_iv{64}, hb_iv{32};
  double last_hb_t = std::nan(""), pause_t = std::nan("");
  bool window = false, eval_window = false;  // inside checkpoint_save..next step / eval_start..eval_end
  bool stall_reported = false;               // a late heartbeat was reported since the last step
  bool ended = false;                        // its last record ends its stream (run_end, error, ...)
  bool stopped = false;                      // ...and that was the launcher's `stopped`: it had gone silent
  bool silence_offered = false;              // a silence candidate was offered since its last record
  // stale logging: the current run of step records with the same logged step
  int64_t stale_step = 0;
  int stale_n = 0;
  double stale_t0 = std::nan(""), prev_t = std::nan("");
  std::optional<int64_t> prev_opt, opt0;
  // (t, phase id) of the last phase_n (<= phase_cap) heartbeats: a ring of phase_cap slots (allocated at
  // the first heartbeat, set_phase_history), the newest before phase_head.
  std::vector<double> phase_t;
  std::vector<uint8_t> phase_id;
  size_t phase_head = 0, phase_n = 0, phase_cap = kMaxPhaseHistory;

  double heartbeat_interval() const { return hb_iv.size() ? hb_iv.median() : kDefaultHeartbeat; }
  bool beats() const { return std::isfinite(last_hb_t); }  // its watchdog has written a heartbeat
  // The time the step deadline counts from: the last step or the end of the last pause.
  double reference() const {
    const double ref = later(last_step_t, pause_t);
    return std::isfinite(ref) ? ref : first_t;
  }

  void restart(double t) {
    last_step_t = last_hb_t = std::nan("");
    since_start = 0;
    pause_t = t;
    window = eval_window = stall_reported = false;
  }

  // Called first for every record with a finite t.
  void clock(double t) {
    if (std::isfinite(latest_t) && t < latest_t - 1.0) restart(t);  // the clock went back
    if (!std::isfinite(first_t)) first_t = t;
  }

  // A step record (t NaN when it has none; opt_step when has_opt). Returns the length of the run of
  // records logging this same step while t (and opt_step) advanced: 1 for a new step.
  int on_step(double t, int64_t step, bool has_opt, int64_t opt) {
    const bool has_t = std::isfinite(t);
    if (has_t && since_start == 0 && std::isfinite(reference())) first_step_s = t - reference();
    if (has_t && std::isfinite(last_step_t) && t > last_step_t) step_iv.push(t - last_step_t);
    if (step_records > 0 && step == stale_step) {
      const bool t_known = has_t && std::isfinite(prev_t), opt_known = has_opt && prev_opt;
      const bool advancing = (t_known || opt_known) && (!t_known || t > prev_t) && (!opt_known || opt > *prev_opt);
      if (advancing) ++stale_n;  // else a duplicated line: ignored
    } else {
      stale_step = step;
      stale_n = 1;
      stale_t0 = t;
      opt0 = has_opt ? std::optional<int64_t>(opt) : std::nullopt;
    }
    if (has_t) prev_t = last_step_t = t;
    if (has_opt) prev_opt = opt;
    last_step = step;
    ++step_records;
    ++since_start;
    stall_reported = false;
    window = eval_window = false;  // a step completed: any pause is over
    return stale_n;
  }

  // clock(t) and on_step() for the common step record at fleet scale, without their tests: a finite t
  // later than the last step's, and not a second behind the rank's latest record, a logged step other
  // than the last one, after the first step since the (re)start. Returns false, having done nothing,
  // for any other record (then clock() and on_step() take it).
  bool plain_step(double t, int64_t step, bool has_opt, int64_t opt) {
    if (!(since_start > 0 && t > last_step_t && t >= latest_t - 1.0 && step != stale_step && first_t == first_t))
      return false;  // (a NaN compares false: last_step_t, latest_t and first_t are finite here)
    step_iv.push(t - last_step_t);
    stale_step = last_step = step;
    stale_n = 1;
    stale_t0 = prev_t = last_step_t = t;
    opt0 = has_opt ? std::optional<int64_t>(opt) : std::nullopt;
    if (has_opt) prev_opt = opt;
    ++step_records;
    ++since_start;
    stall_reported = window = eval_window = false;
    latest_t = latest_t < t ? t : latest_t;
    return true;
  }

  // A heartbeat with a finite t and its phase id. Returns false while the rank is paused (phase
  // checkpoint/eval, inside a pause window), true when its step deadline applies.
  bool on_heartbeat(double t, uint8_t phase) {
    // gap > max(kDeadGap, kDeadBeats x interval), the median only when the gap exceeds kDeadGap
    const double gap = t - last_hb_t;
    if (std::isfinite(last_hb_t) && gap > kDeadGap && gap > kDeadBeats * heartbeat_interval())
      restart(t);  // the watchdog itself stopped: the process was gone, this is a new one
    else if (std::isfinite(last_hb_t) && t > last_hb_t)
      hb_iv.push(t - last_hb_t);
    last_hb_t = t;
    remember_phase(t, phase);
    if (pause_phase(phase)) {
      pause_t = t;
      return false;
    }
    if (window) {
      if (eval_window || !training_phase(phase)) return false;
      window = false;  // back to training after a checkpoint save: the deadline restarts here
      pause_t = t;
    }
    return true;
  }

  // An event at t (the record's, or the latest seen when it has none).
  void on_event(const Record& r, double t) {
    if (r.name == event::checkpoint_save || r.name == event::eval_start) {
      window = true;
      eval_window = r.name == event::eval_start;
      pause_t = later(pause_t, t);
    } else if (r.name == event::eval_end) {
      window = eval_window = false;
      pause_t = later(pause_t, t);
    } else if (r.name == event::run_start || r.name == event::checkpoint_load || r.name == event::resume ||
               r.name == event::stop_for_restart) {
      restart(t);
    }
  }

  // The ring's slots, before the first remember_phase().
  void set_phase_history(size_t cap) {
    phase_cap = std::max<size_t>(cap, 1);
    phase_t.assign(phase_cap, 0.0);
    phase_id.assign(phase_cap, 0);
    phase_head = phase_n = 0;
  }
  void remember_phase(double t, uint8_t id) {
    phase_t[phase_head] = t;
    phase_id[phase_head] = id;
    phase_head = phase_head + 1 == phase_cap ? 0 : phase_head + 1;
    phase_n += phase_n < phase_cap;
  }

  // The phase id of the latest heartbeat at or before t (nullopt when none is remembered).
  std::optional<uint8_t> phase_at(double t) const {
    for (size_t k = 0; k < phase_n; ++k) {  // newest first
      const size_t i = (phase_head + phase_cap - 1 - k) % phase_cap;
      if (phase_t[i] <= t) return phase_id[i];
    }
    return std::nullopt;
  }

  // clock(t) and on_heartbeat(t, phase) for the common heartbeat at fleet scale, when it has nothing to
  // judge: a training phase outside any pause window, the rank's clock not gone back (t >= latest_t - 1),
  // the watchdog's last beat less than kDeadGap before (no restart), and t no later than the last step
  // + kMin (kMin <= every step deadline, so it cannot be late: the caller's maybe_late() would say no).
  // Also moves latest_t. Returns false, having done nothing, for any other heartbeat. (latest_t finite
  // implies first_t finite: both are set from the first finite t.)
  bool quiet_beat(double t, uint8_t phase, double kMin) {
    const double gap = t - last_hb_t;
    if (!(gap > 0 && gap <= kDeadGap && t >= latest_t - 1.0 && t <= last_step_t + kMin) || window ||
        !training_phase(phase))
      return false;  // (a NaN compares false: last_hb_t, latest_t and last_step_t are finite here)
    stopped = silence_offered = false;
    hb_iv.push(gap);
    last_hb_t = t;
    remember_phase(t, phase);
    latest_t = latest_t < t ? t : latest_t;
    return true;
  }
};

}  // namespace flatline::detail
