// run_not_alive (DESIGN.md cause 1): is the step counter still moving?
//
// Signal: per rank, the wall clock t of its step records against its own heartbeats (a watchdog
//   thread writes them whatever the training does), the heartbeat phase, checkpoint/eval/restart
//   events, `error` events; and the logged `step` (and `opt_step`) of consecutive step records.
// Window: per rank, the median of its last 64 step-to-step intervals and of its last 32 heartbeat
//   spacings (default heartbeat interval 0.5 s until two heartbeats are seen).
// Warm-up: until a rank has 4 step intervals (5 step records), and for the first step after every
//   (re)start (run_start / stop_for_restart / resume / checkpoint_load, or a heartbeat after a gap
//   of > max(2 s, 4 intervals): the watchdog itself was gone), the step deadline is a fixed 10 s.
//   A heartbeat without a phase also gets the 10 s bound (a pause cannot be told from a hang).
// Thresholds:
//   hang: a heartbeat of rank r at t > ref + 3 * median_step + heartbeat_interval, ref = r's last
//     step record or the end of its last pause, whichever is later. Three typical steps plus one
//     heartbeat period of slack (the heartbeat that notices may arrive that late) with no step.
//     detected_step = last completed step, onset = that + 1.
//   stale logging: 3 consecutive step records of one rank with the same `step` while t (and
//     opt_step, where logged) advance. onset = stuck step + 1; detected_step = the estimated true
//     step of the 3rd record (stuck step + 2): the logged value is frozen, so reporting it would
//     put the detection before the fault.
//   error: an `error` event whose detail mentions a timeout or a collective (timed out, nccl, gloo,
//     allreduce, barrier, watchdog) is a candidate at its own t.
// False-positive guards: checkpoint and eval pauses (heartbeat phase checkpoint/eval, or inside a
//   checkpoint_save..next step / eval_start..eval_end window; the deadline restarts when the pause
//   ends); a restart (stop_for_restart, the gap without heartbeats and the new process's start-up
//   restart the deadline; re-emitted steps increase, so they are not "the same step repeated"); duplicated lines (same
//   step, t not advancing: ignored); the end of the stream (finish() never declares a hang).
// Cross-rank: each rank is judged on its own heartbeats only; the earliest candidate (t, then rank)
//   is committed once every rank's records have passed that t (RankGate), so the finding does not
//   depend on how the ranks interleave.
#include <algorithm>
#include <cctype>
#include <deque>
#include <map>

#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"
#include <fmt/ranges.h>

namespace flatline {
namespace {
using namespace detail;

constexpr double kFallbackBound = 10.0;    // s: deadline before the median is known
constexpr double kDefaultHeartbeat = 0.5;  // s: heartbeat interval until measured
constexpr size_t kMinIntervals = 4;        // 5 step records
constexpr double kSlackSteps = 3.0;        // typical steps of slack
constexpr int kStaleRepeats = 3;           // same logged step this many records in a row
constexpr size_t kPhaseHistory = 4096;     // heartbeats kept per rank for the evidence line
constexpr double kDeadGap = 2.0;           // s: a heartbeat gap this long (and
constexpr double kDeadBeats = 4.0;         //    this many intervals) means the process restarted

bool pause_phase(const std::string& p) { return p == "checkpoint" || p == "eval"; }
bool training_phase(const std::string& p) {
  return p == "data" || p == "compute" || p == "collective" || p == "optimizer";
}
bool mentions_hang(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* w : {"timeout", "timed out", "collective", "allreduce", "all_reduce", "all-reduce", "barrier",
                        "nccl", "gloo", "watchdog"})
    if (s.find(w) != std::string::npos) return true;
  return false;
}
double latest(double a, double b) {
  if (!std::isfinite(a)) return b;
  if (!std::isfinite(b)) return a;
  return std::max(a, b);
}

enum class Kind { hang, stale, error };

class RunNotAlive : public Detector {
 public:
  explicit RunNotAlive(const DetectorConfig& c) : gate_(c.world_size, /*exact_positions=*/false) {}
  const char* cause() const override { return "run_not_alive"; }

  void observe(const Record& r) override {
    if (r.rank < 0) return;
    any_records_ = true;
    gate_.see(r.rank);
    Rank& s = ranks_[r.rank];
    const bool has_t = finite(r.t);
    if (has_t) {
      any_t_ = true;
      if (finite(s.latest_t) && r.t < s.latest_t - 1.0) restart(s, r.t);  // the clock went back
      if (!finite(s.first_t)) s.first_t = r.t;
    }
    switch (r.kind) {
      case RecordKind::step: on_step(r, s, has_t); break;
      case RecordKind::heartbeat: on_heartbeat(r, s, has_t); break;
      case RecordKind::event: on_event(r, s, has_t); break;
      case RecordKind::eval:
        if (has_t) s.pause_t = r.t;
        break;
    }
    if (has_t) {
      s.latest_t = latest(s.latest_t, r.t);
      gate_.advance(r.rank, r.t);
    }
    if (gate_.poll()) commit();
  }

  void finish(double) override {
    if (gate_.flush()) commit();
  }
  std::optional<Finding> finding() const override { return final_; }

  CheckResult check() const override {
    CheckResult c{cause(), CheckState::pending, ""};
    if (final_) {
      c.state = CheckState::fail;
      c.detail = final_->evidence.empty() ? "" : final_->evidence.front();
    } else if (!any_records_) {
      c.detail = "no records yet";
    } else if (gate_.has_candidate()) {
      c.detail = fmt::format("possible stall after step {} on rank {}; waiting for {} other rank(s) to pass t={}",
                             gate_.candidate()->detected_step, gate_.candidate_rank(), gate_.waiting_for(),
                             secs(gate_.candidate_position()));
    } else if (!any_hb_ && !any_t_) {
      c.state = CheckState::cannot_run;
      c.detail = "missing heartbeats and t: log a wall-clock heartbeat from a watchdog thread";
    } else {
      c.state = CheckState::pass;
      const Rank* s = nullptr;
      int rank = -1;
      for (const auto& [k, v] : ranks_)
        if (v.step_records > 0) { s = &v; rank = k; break; }
      if (!s) {
        c.detail = "no step record yet";
      } else {
        c.detail = fmt::format("steps advancing: rank {} last step {}", rank, s->last_step);
        if (finite(s->last_step_t)) c.detail += " at t=" + secs(s->last_step_t);
        if (s->step_iv.size()) c.detail += fmt::format(" (median step {})", secs(s->step_iv.median()));
        c.detail += any_hb_ ? fmt::format("; heartbeats every {}", secs(s->hb_iv.size() ? s->hb_iv.median()
                                                                                        : kDefaultHeartbeat))
                            : "; no heartbeats, so only stale logging was checked (log a watchdog heartbeat)";
      }
    }
    return c;
  }

 private:
  struct Rank {
    int64_t last_step = 0, step_records = 0, since_start = 0;
    double last_step_t = std::nan(""), first_t = std::nan(""), latest_t = std::nan("");
    Ring step_iv{64}, hb_iv{32};
    double last_hb_t = std::nan(""), pause_t = std::nan("");
    bool window = false, eval_window = false, stall_offered = false;
    // stale logging
    int64_t stale_step = 0;
    int stale_n = 0;
    double stale_t0 = std::nan(""), prev_t = std::nan("");
    std::optional<int64_t> prev_opt, opt0;
    std::deque<std::pair<double, std::string>> phases;  // (t, phase) of recent heartbeats
  };

  static void restart(Rank& s, double t) {
    s.last_step_t = std::nan("");
    s.last_hb_t = std::nan("");
    s.since_start = 0;
    s.pause_t = t;
    s.window = s.eval_window = s.stall_offered = false;
  }

  void on_step(const Record& r, Rank& s, bool has_t) {
    if (has_t && finite(s.last_step_t) && r.t > s.last_step_t) s.step_iv.push(r.t - s.last_step_t);
    // --- stale logging: the same logged step again while the clock / optimizer moved on
    if (s.step_records > 0 && r.step == s.stale_step) {
      const bool t_known = has_t && finite(s.prev_t), opt_known = r.opt_step && s.prev_opt;
      const bool advancing = (t_known || opt_known) && (!t_known || r.t > s.prev_t) &&
                             (!opt_known || *r.opt_step > *s.prev_opt);
      if (advancing && ++s.stale_n == kStaleRepeats) offer_stale(r, s);
    } else {
      s.stale_step = r.step;
      s.stale_n = 1;
      s.stale_t0 = r.t;
      s.opt0 = r.opt_step;
    }
    if (has_t) s.prev_t = r.t;
    if (r.opt_step) s.prev_opt = r.opt_step;
    s.last_step = r.step;
    if (has_t) s.last_step_t = r.t;
    ++s.step_records;
    ++s.since_start;
    s.stall_offered = false;
    s.window = s.eval_window = false;  // a step completed: any pause is over
  }

  void on_heartbeat(const Record& r, Rank& s, bool has_t) {
    any_hb_ = true;
    if (!has_t) return;
    const double hb = s.hb_iv.size() ? s.hb_iv.median() : kDefaultHeartbeat;
    if (finite(s.last_hb_t) && r.t - s.last_hb_t > std::max(kDeadGap, kDeadBeats * hb)) {
      restart(s, r.t);  // the watchdog itself stopped: the process was gone, this is a new one
    } else if (finite(s.last_hb_t) && r.t > s.last_hb_t) {
      s.hb_iv.push(r.t - s.last_hb_t);
    }
    s.last_hb_t = r.t;
    s.phases.emplace_back(r.t, r.phase);
    if (s.phases.size() > kPhaseHistory) s.phases.pop_front();
    if (pause_phase(r.phase)) {
      s.pause_t = r.t;
      return;
    }
    if (s.window) {
      if (s.eval_window || !training_phase(r.phase)) return;
      s.window = false;  // back to training after a checkpoint save: the deadline restarts here
      s.pause_t = r.t;
    }
    if (s.stall_offered) return;
    double ref = latest(s.last_step_t, s.pause_t);
    if (!finite(ref)) ref = s.first_t;
    const bool warm = s.step_iv.size() >= kMinIntervals && s.since_start >= 1;
    const double med = s.step_iv.median();
    // Without a phase a pause cannot be told from a hang: only the start-up bound is safe.
    const double bound = std::max(warm ? kSlackSteps * med + hb : kFallbackBound,
                                  training_phase(r.phase) ? 0.0 : kFallbackBound);
    if (!(r.t > ref + bound)) return;
    s.stall_offered = true;
    Finding f;
    f.cause = cause();
    f.onset_step = s.last_step + 1;
    f.detected_step = s.last_step;
    f.detected_t = r.t;
    f.confidence = 0.9;
    const double since = finite(s.last_step_t) ? r.t - s.last_step_t : r.t - ref;
    std::string line = s.step_records ? fmt::format("no step for {} after step {}", secs(since), s.last_step)
                                      : fmt::format("no step for {} since start", secs(since));
    line += warm ? fmt::format(" (median step {})", secs(med))
                 : fmt::format(" (start-up bound {})", secs(kFallbackBound));
    f.evidence.push_back(line);
    offer(r.rank, r.t, std::move(f), Kind::hang);
  }

  void on_event(const Record& r, Rank& s, bool has_t) {
    const double t = has_t ? r.t : s.latest_t;
    if (r.name == "checkpoint_save" || r.name == "eval_start") {
      s.window = true;
      s.eval_window = r.name == "eval_start";
      s.pause_t = latest(s.pause_t, t);
    } else if (r.name == "eval_end") {
      s.window = s.eval_window = false;
      s.pause_t = latest(s.pause_t, t);
    } else if (r.name == "run_start" || r.name == "checkpoint_load" || r.name == "resume" ||
               r.name == "stop_for_restart") {
      restart(s, t);
    } else if (r.name == "error" && mentions_hang(r.detail)) {
      Finding f;
      f.cause = cause();
      f.onset_step = s.last_step + 1;
      f.detected_step = s.last_step;
      f.detected_t = t;
      f.confidence = 0.8;
      f.evidence.push_back(fmt::format("error on rank {} after step {}: {}", r.rank, s.last_step, r.detail));
      offer(r.rank, t, std::move(f), Kind::error);
    }
  }

  void offer_stale(const Record& r, const Rank& s) {
    Finding f;
    f.cause = cause();
    f.onset_step = s.stale_step + 1;
    f.detected_step = s.stale_step + (kStaleRepeats - 1);
    f.detected_t = r.t;
    f.confidence = 0.85;
    std::string line = fmt::format("step {} logged {} times in a row by rank {}", s.stale_step, kStaleRepeats, r.rank);
    if (finite(s.stale_t0) && finite(r.t)) line += fmt::format(" over {} of wall clock", secs(r.t - s.stale_t0));
    if (s.opt0 && r.opt_step) line += fmt::format(" while opt_step advanced {} -> {}", *s.opt0, *r.opt_step);
    f.evidence.push_back(line + ": the logged step/loss are stale");
    offer(r.rank, r.t, std::move(f), Kind::stale);
  }

  void offer(int rank, double pos, Finding f, Kind k) {
    gate_.offer(rank, pos, std::move(f));
    if (gate_.candidate_rank() == rank && gate_.candidate_position() == (finite(pos) ? pos : gate_.position(rank)))
      kind_ = k;
  }

  // The committed candidate, with every rank's heartbeat phase at its t (deterministic: per-rank data).
  void commit() {
    final_ = gate_.finding();
    if (!final_ || kind_ == Kind::stale || !any_hb_) return;
    std::map<std::string, std::vector<int>> by_phase;
    for (const auto& [rank, s] : ranks_) {
      auto it = std::upper_bound(s.phases.begin(), s.phases.end(), final_->detected_t,
                                 [](double t, const auto& p) { return t < p.first; });
      if (it == s.phases.begin()) continue;
      const std::string& ph = std::prev(it)->second;
      by_phase[ph.empty() ? "?" : ph].push_back(rank);
    }
    std::vector<std::pair<std::string, std::vector<int>>> groups(by_phase.begin(), by_phase.end());
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() != b.second.size() ? a.second.size() < b.second.size() : a.second[0] < b.second[0];
    });
    std::string line = kind_ == Kind::hang ? "heartbeats continue; " : "";
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& [ph, rs] = groups[i];
      line += fmt::format("{}{} {} phase={}", i ? ", " : "", rs.size() > 1 ? "ranks" : "rank", fmt::join(rs, ","), ph);
    }
    if (!groups.empty()) final_->evidence.front() += "; " + line;
  }

  std::map<int, Rank> ranks_;
  RankGate gate_;
  Kind kind_ = Kind::hang;
  std::optional<Finding> final_;
  bool any_records_ = false, any_t_ = false, any_hb_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("run_not_alive", RunNotAlive);

}  // namespace flatline
