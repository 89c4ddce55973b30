// run_not_alive (docs/DESIGN.md §2, cause 1): is the step counter still moving?
//
// Signal: per rank, the wall clock t of its step records against its own heartbeats (a watchdog
//   thread writes them whatever the training does), the heartbeat phase, checkpoint/eval/restart
//   events, `error` events; and the logged `step` (and `opt_step`) of consecutive step records.
// Window: per rank, the median of its last 64 step-to-step intervals and of its last 32 heartbeat
//   spacings (default heartbeat interval 0.5 s until two heartbeats are seen).
// Warm-up (how long a step may take, docs/DESIGN.md §2): the first step after every (re)start
//   (run_start / stop_for_restart / resume / checkpoint_load, or a heartbeat after a gap of
//   > max(2 s, 4 intervals): the watchdog itself was gone) may take kFirstStepAllowanceS (120 s,
//   core/protocol.h: loading, compiling, the first collectives; a large model's step takes tens of
//   seconds from the start). From the first step on, until a rank has 4 step intervals (5 step
//   records), its deadline is max(10 s, 3 * the longest step it has shown + heartbeat_interval), the
//   first step's own duration included: a job whose steps are slow from the start is judged by them.
//   A heartbeat without a phase gets at least the 10 s bound (a pause cannot be told from a hang).
// Thresholds:
//   hang: a heartbeat of rank r at t > ref + max(2 s, 3 * median_step + heartbeat_interval), ref = r's last
//     step record or the end of its last pause, whichever is later. Three typical steps plus one
//     heartbeat period of slack (the heartbeat that notices may arrive that late) with no step, and
//     never less than 2 s (kMinStallS: a healthy fast rank on a shared host stalls for fractions of one).
//     onset = detected_step = the stalled step (last completed + 1; the `step` the harness's
//     watchdog writes on the heartbeat), not the last completed step: the scorer counts a detection
//     before the fault's active_from (= the stalled step) as a false alarm, and docs/DESIGN.md §6
//     defines detected_step as the step of the record that fired.
//   stale logging: 3 consecutive step records of one rank with the same `step` while t (and
//     opt_step, where logged) advance. onset = stuck step + 1; detected_step = the estimated true
//     step of the 3rd record (stuck step + 2): the logged value is frozen, so reporting it would
//     put the detection before the fault.
//   error: an `error` event whose detail mentions a timeout, a collective or a dead peer (timed out,
//     nccl, gloo, allreduce, barrier, watchdog, peer died, torch.distributed.elastic's ChildFailedError,
//     ...) is a candidate at its own t; so is one that says the process died (CUDA out of memory, a
//     CUDA error, a fatal signal, the elastic agent's "closing signal" to the survivors), named a crash.
//   silence: a rank whose watchdog beats writes nothing at all for max(10 heartbeat intervals, 2 s),
//     judged against the stream's clock: the launcher's (advance(now), every poll while it runs), the
//     end of the run (finish(t_end)), or the `stopped` event the launcher appends for a rank that it
//     killed or that died. Heartbeats go on whatever training does, so ten missing ones mean the process
//     is stopped (SIGSTOP, a paused host) or cannot write. detected_t = its last record + the bound; the
//     finding names the rank. A rank whose stream ended (run_end, error, interrupted, stopped,
//     stop_for_restart) is never silent.
// False-positive guards: checkpoint and eval pauses (heartbeat phase checkpoint/eval, or inside a
//   checkpoint_save..next step / eval_start..eval_end window; the deadline restarts when the pause
//   ends); a restart (stop_for_restart, the gap without heartbeats and the new process's start-up
//   restart the deadline; re-emitted steps increase, so they are not "the same step repeated");
//   duplicated lines (same step, t not advancing: ignored); the end of the stream (finish() never
//   declares a hang).
// Cross-rank: each rank is judged on its own heartbeats only (not "any rank's heartbeat": which
//   rank's records arrive first depends on the interleaving); the earliest candidate (t, then rank)
//   is committed once every rank's records have passed that t (RankGate), so the finding does not
//   depend on how the ranks interleave. A dead rank stops waiting at finish(); its peers, stuck in
//   the collective, keep beating and fire on their own. advance(now) also moves every rank to
//   now - kVisibleLatencyS (a record is on disk within milliseconds of its t, and the launcher reads
//   it within one poll), so a silent rank does not hold a candidate back forever; the evidence names
//   the ranks silent at the detection. Per-rank bookkeeping: rank_clock.h.
#include "detectors/run_not_alive.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>
#include <utility>

#include <fmt/ranges.h>

#include "core/protocol.h"
#include "detectors/rank_clock.h"
#include "detectors/rank_gate.h"
#include "detectors/registry.h"

namespace flatline {
namespace {
using namespace detail;

using namespace run_not_alive;  // its thresholds (detectors/run_not_alive.h)

bool mentions_hang(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* w : {"timeout", "timed out", "collective", "allreduce", "all_reduce", "all-reduce", "barrier",
                        "nccl", "gloo", "watchdog", "peer died", "closed by peer", "connection reset",
                        "childfailederror", "torch.distributed.elastic"})
    if (s.find(w) != std::string::npos) return true;
  return false;
}

// A rank's death as its console says it (a crash, apart from a hang): CUDA's allocator, a CUDA error, a
// fatal signal, the elastic agent ending the others after one died, a stop from outside (Ctrl-C, a launcher's
// kill, the scheduler's cancel at a time limit): ended long after its last step, it hung first.
bool mentions_death(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* w : {"out of memory", "outofmemoryerror", "cuda error", "closing signal", "segmentation fault",
                        "sigsegv", "sigabrt", "sigkill", "exitcode: -", "exitcode  : -", "exitcode: 1", "exitcode  : 1",
                        "keyboardinterrupt", "killing subprocess", "received sigterm", " hangup ", " cancelled at ",
                        "job step aborted", "uncaught exception"})
    if (s.find(w) != std::string::npos) return true;
  return false;
}

enum class Kind { hang, stale, error, silent };

class RunNotAlive final : public BlockDetector {
 public:
  explicit RunNotAlive(const DetectorConfig& c) : gate_(c.world_size, /*exact_positions=*/false), world_(c.world_size) {}
  const char* cause() const override { return "run_not_alive"; }

  // Events and eval records, one at a time.
  void observe_event(const Record& r) override {
    if (r.rank < 0) return;
    any_records_ = true;
    gate_.see(r.rank);
    RankClock& s = ranks_[r.rank];
    const bool has_t = finite(r.t);
    if (r.kind == RecordKind::event && r.name == event::stopped) {  // the launcher's word, not the rank's
      if (has_t) {
        silence_check(r.rank, s, r.t);
        gate_.advance(r.rank, r.t);
      }
      s.ended = s.stopped = true;
      if (gate_.poll()) commit(std::nan(""));
      return;
    }
    s.stopped = false;
    // A stream ends with its end event; stray heartbeats of the exiting process do not reopen it, a
    // step or a new process's start does.
    s.ended = stream_ended_after(s.ended, r);
    s.silence_offered = false;
    if (has_t) {
      any_t_ = true;
      s.clock(r.t);
    }
    if (r.kind == RecordKind::event) {
      const double t = has_t ? r.t : s.latest_t;
      s.on_event(r, t);
      // a hang's words first: a watchdog timeout that then aborts the process (SIGABRT) was a hang
      if (r.name == event::error && mentions_hang(r.detail))
        offer(r.rank, t, finding(s, t, 0.8, fmt::format("error on rank {} after step {}: {}", r.rank, s.last_step,
                                                        r.detail)),
              Kind::error);
      else if (r.name == event::error && mentions_death(r.detail)) {
        // Ended long after its last step (no step for 10 median steps and a minute): it hung, then was
        // killed; else it died while stepping: a crash.
        const double gap = finite(s.last_step_t) && finite(t) ? t - s.last_step_t : 0;
        const double median = s.step_iv.size() ? s.step_iv.median() : 0;
        const bool hung = gap > std::max(60.0, 10 * median);
        offer(r.rank, t,
              finding(s, t, 0.8,
                      hung ? fmt::format("no step for {} after step {}, then the run was ended: {}", secs(gap),
                                         s.last_step, r.detail)
                           : fmt::format("the run died (a crash, not a hang) after step {}: {}", s.last_step, r.detail)),
              Kind::error);
      }
    } else if (has_t) {
      s.pause_t = r.t;  // an eval record: eval is running
    }
    if (has_t) {
      s.latest_t = later(s.latest_t, r.t);
      gate_.advance(r.rank, r.t);
    }
    if (gate_.poll()) commit(std::nan(""));
  }

  // A block in stream order: each heartbeat run before the row it precedes, then the row.
  // A block in lockstep (rank i on row i, finite t): its ranks are made known to the gate and the
  // per-rank table once, and each row takes the same steps without those checks (lockstep_row).
  void observe_block(const StepBlock& b) override {
    const size_t n = b.rows(), nb = b.beats.size();
    if (b.lockstep) {
      any_records_ = any_t_ = true;
      gate_.see_all(static_cast<int>(n));
      ranks_.present_upto(static_cast<int>(n));
    }
    // In lockstep with no candidate pending, the plain rows and quiet heartbeats up to the first record
    // that may offer a candidate go through plain_prefix(): they cannot offer one, so the rows' positions
    // are moved in one pass afterwards (positions only grow, and a poll needs a candidate: the same
    // commits; docs/DESIGN.md §2 "Passes over blocks"); the rest of the block, from that record on,
    // record by record.
    size_t i0 = 0, j = 0;
    if (b.lockstep && !gate_.has_candidate()) {
      std::tie(i0, j) = plain_prefix(b);
      gate_.advance_rows(b.t.data(), 0, i0);
    }
    for (size_t i = i0; i <= n; ++i) {
      for (; j < nb && b.beats[j].row <= i; ++j)
        beats(b, b.beats[j], b.lockstep && static_cast<size_t>(b.beats[j].rank) < n);
      if (i == n) break;
      if (b.lockstep) lockstep_row(b, i);
      else step_row(b, i);
    }
  }

  // The records of a block in lockstep in stream order while each is a plain row (RankClock::plain_step)
  // or a quiet heartbeat (quiet_beat) of a rank in the block; returns (i, j): rows [0, i) and heartbeat
  // runs [0, j) taken. The rows do not move their gate positions (the caller does).
  std::pair<size_t, size_t> plain_prefix(const StepBlock& b) {
    const size_t n = b.rows(), nb = b.beats.size();
    const StepBlock::Beats* runs = b.beats.data();
    const double* t = b.t.data();
    const int64_t *step = b.step.data(), *opt = b.opt_step.data();
    const uint64_t* flags = b.flags.data();
    RankClock* clocks = n ? &ranks_.unchecked(0) : nullptr;  // (lockstep: ranks 0..n-1 are present)
    size_t i = 0, j = 0;
    for (;;) {
      const size_t until = j < nb ? std::min<size_t>(runs[j].row, n) : n;
      for (; i < until; ++i) {
        RankClock& s = clocks[i];
        if (!s.plain_step(t[i], step[i], flags[i] & StepBlock::kOptStep, opt[i])) return {i, j};
        s.stopped = s.ended = s.silence_offered = false;  // a step opens the stream again
      }
      if (j == nb) return {i, j};
      const StepBlock::Beats& run = runs[j];
      if (!(run.n == 1 && run.phase < kOtherPhase && static_cast<size_t>(run.rank) < n &&
            clocks[run.rank].quiet_beat(run.t0, run.phase, kMinStallS)))
        return {i, j};
      any_hb_ = true;
      gate_.advance_seen(run.rank, run.t0);
      ++j;
    }
  }

  // step_row() for row i of a block in lockstep: rank i, already known, with a finite t.
  void lockstep_row(const StepBlock& b, size_t i) {
    const int r = static_cast<int>(i);
    RankClock& s = ranks_.unchecked(r);
    const double t = b.t[i];
    s.stopped = s.ended = s.silence_offered = false;  // a step opens the stream again
    const bool has_opt = b.flags[i] & StepBlock::kOptStep;
    if (!s.plain_step(t, b.step[i], has_opt, b.opt_step[i])) {
      s.clock(t);
      if (s.on_step(t, b.step[i], has_opt, b.opt_step[i]) == kStaleRepeats)
        offer_stale(r, t, has_opt ? std::optional<int64_t>(b.opt_step[i]) : std::nullopt, s);
      s.latest_t = later(s.latest_t, t);
    }
    gate_.advance_seen(r, t);
    if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
  }

  void step_row(const StepBlock& b, size_t i) {
    const int r = b.rank[i];
    if (r < 0) return;
    any_records_ = true;
    gate_.see(r);
    RankClock& s = ranks_[r];
    const double t = b.t[i];
    const bool has_t = finite(t);
    s.stopped = s.ended = s.silence_offered = false;  // a step opens the stream again
    if (has_t) {
      any_t_ = true;
      s.clock(t);
    }
    const bool has_opt = b.flags[i] & StepBlock::kOptStep;
    if (s.on_step(t, b.step[i], has_opt, b.opt_step[i]) == kStaleRepeats)
      offer_stale(r, t, has_opt ? std::optional<int64_t>(b.opt_step[i]) : std::nullopt, s);
    if (has_t) {
      s.latest_t = later(s.latest_t, t);
      gate_.advance(r, t);
    }
    if (gate_.poll()) commit(std::nan(""));
  }

  // A run of one rank's heartbeats, beat by beat (t0, t0 + dt, ...: block.h). `known`: the rank is
  // already known to the gate and the per-rank table (a block in lockstep that has its row).
  void beats(const StepBlock& b, const StepBlock::Beats& run, bool known) {
    const int r = run.rank;
    if (r < 0) return;
    any_records_ = true;
    any_hb_ = true;
    if (!known) gate_.see(r);
    RankClock& s = known ? ranks_.unchecked(r) : ranks_[r];
    if (s.phase_t.empty()) s.set_phase_history(RankClock::phase_history(world_));
    const uint8_t phase = run.phase < kOtherPhase ? run.phase : intern(b.phase_name(run.phase));
    double t = run.t0;
    for (int k = 0; k < run.n; ++k, t += run.dt) {
      if (s.quiet_beat(t, phase, kMinStallS)) {  // (maybe_late: no deadline is shorter than kMinStallS)
        any_t_ = true;
        gate_.advance_seen(r, t);
        if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
        continue;
      }
      s.stopped = s.silence_offered = false;  // a stray heartbeat does not reopen an ended stream
      if (!finite(t)) {
        if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
        continue;
      }
      any_t_ = true;
      s.clock(t);
      if (s.on_heartbeat(t, phase) && maybe_late(t, s)) check_deadline(r, t, s, phase);
      s.latest_t = later(s.latest_t, t);
      gate_.advance_seen(r, t);
      if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
    }
  }

  void advance(double now) override {
    if (final_ || !finite(now)) return;
    ranks_.for_each([&](int rank, RankClock& s) {
      silence_check(rank, s, now);
      gate_.advance(rank, now - kVisibleLatencyS);
    });
    if (gate_.poll()) commit(now);
  }

  void finish(double t_end) override {
    if (!final_ && finite(t_end)) ranks_.for_each([&](int rank, RankClock& s) { silence_check(rank, s, t_end); });
    // a pending candidate; the end of the stream itself is no hang
    if (gate_.flush()) commit(t_end);
  }
  std::optional<Finding> finding() const override { return final_; }

  CheckResult check() const override {
    if (final_) return {cause(), CheckState::fail, final_->evidence.empty() ? "" : final_->evidence.front()};
    if (!any_records_) return {cause(), CheckState::pending, "no records yet"};
    if (gate_.has_candidate())
      return {cause(), CheckState::pending,
              fmt::format("possible stall at step {} on rank {}; waiting for {} other rank(s) to pass t={}",
                          gate_.candidate()->detected_step, gate_.candidate_rank(), gate_.waiting_for(),
                          secs(gate_.candidate_position()))};
    if (!any_hb_ && !any_t_)
      return {cause(), CheckState::cannot_run,
              "missing heartbeats and t: log a wall-clock heartbeat from a watchdog thread"};
    for (const auto& [rank, s] : ranks_) {
      if (!s.step_records) continue;
      std::string d = fmt::format("steps advancing: rank {} last step {}", rank, s.last_step);
      if (finite(s.last_step_t)) d += " at t=" + secs(s.last_step_t);
      if (s.step_iv.size()) d += fmt::format(" (median step {})", secs(s.step_iv.median()));
      d += any_hb_ ? "; heartbeats every " + secs(s.heartbeat_interval())
                   : "; no heartbeats, so only stale logging was checked (log a watchdog heartbeat)";
      return {cause(), CheckState::pass, d};
    }
    return {cause(), CheckState::pass, "no step record yet"};
  }

 private:
  Finding finding(const RankClock& s, double t, double confidence, std::string evidence) const {
    Finding f;
    f.cause = cause();
    f.onset_step = s.last_step + 1;
    f.detected_step = s.last_step + 1;  // the stalled step (the one the watchdog's heartbeat names)
    f.detected_t = t;
    f.confidence = confidence;
    f.evidence.push_back(std::move(evidence));
    return f;
  }

  // hang: a heartbeat later than the rank's step deadline.
  // A phase's id: one of the watchdog's, or another name remembered once for this detector.
  uint8_t intern(std::string_view p) {
    const uint8_t k = known_phase(p);
    if (k != kOtherPhase) return k;
    for (size_t i = 0; i < other_phases_.size(); ++i)
      if (other_phases_[i] == p) return static_cast<uint8_t>(kOtherPhase + i);
    if (other_phases_.size() >= 255 - kOtherPhase) return kPhaseNone;  // absurdly many names: evidence only
    other_phases_.emplace_back(p);
    return static_cast<uint8_t>(kOtherPhase + other_phases_.size() - 1);
  }
  std::string phase_name(uint8_t id) const {
    return id < kOtherPhase ? kPhaseNames[id] : other_phases_[static_cast<size_t>(id - kOtherPhase)];
  }

  static_assert(kMinStallS <= kFallbackBound && kMinStallS <= kFirstStepAllowanceS, "RankClock::quiet_beat's bound");
  // Fast path: the bound below is at least this (a median is >= the minimum), so an earlier heartbeat
  // cannot be late; the medians are computed only for heartbeats past it.
  static bool maybe_late(double t, const RankClock& s) {
    if (s.stall_reported) return false;
    const bool first = s.since_start == 0;  // no step yet since the (re)start
    const bool warm = s.step_iv.size() >= kMinIntervals && !first;
    const double lower = first  ? kFirstStepAllowanceS
                         : warm ? std::max(kMinStallS, kSlackSteps * s.step_iv.min() +
                                                           (s.hb_iv.size() ? s.hb_iv.min() : s.kDefaultHeartbeat))
                                : kFallbackBound;
    return t > s.reference() + lower;
  }
  void check_deadline(int rank, double t, RankClock& s, uint8_t phase) {
    if (!maybe_late(t, s)) return;
    const double ref = s.reference();
    const bool first = s.since_start == 0;
    const bool warm = s.step_iv.size() >= kMinIntervals && !first;
    const double med = s.step_iv.median();
    // Before the median: the longest step this rank has shown, its first (from the start) included.
    double longest = finite(s.first_step_s) ? s.first_step_s : 0;
    if (s.step_iv.size()) longest = std::max(longest, s.step_iv.max());
    const double warming = std::max(kFallbackBound, kSlackSteps * longest + s.heartbeat_interval());
    const double by_steps = first ? kFirstStepAllowanceS
                            : warm ? std::max(kMinStallS, kSlackSteps * med + s.heartbeat_interval())
                                   : warming;
    // Without a phase a pause cannot be told from a hang: never less than the start-up bound.
    const double bound = std::max(by_steps, training_phase(phase) ? 0.0 : kFallbackBound);
    if (!(t > ref + bound)) return;
    s.stall_reported = true;
    const double since = t - (finite(s.last_step_t) ? s.last_step_t : ref);
    std::string line = s.step_records ? fmt::format("no step for {} after step {}", secs(since), s.last_step)
                                      : fmt::format("no step for {} since start", secs(since));
    line += first  ? fmt::format(" (a first step's allowance {})", secs(kFirstStepAllowanceS))
            : warm ? fmt::format(" (median step {})", secs(med))
                   : fmt::format(" (3 x the longest step so far, {}, and a heartbeat)", secs(longest));
    offer(rank, t, finding(s, t, 0.9, line), Kind::hang);
  }

  // silence: nothing from a beating rank for the bound, at the stream's clock `now`.
  static double silence_bound(const RankClock& s) {
    return std::max(kSilentBeats * s.heartbeat_interval(), kMinSilenceS);
  }
  void silence_check(int rank, RankClock& s, double now) {
    if (s.ended || s.silence_offered || !s.beats() || !finite(s.latest_t)) return;
    const double bound = silence_bound(s);
    if (!(now - s.latest_t > bound)) return;
    s.silence_offered = true;
    const double t = s.latest_t + bound;
    offer(rank, t,
          finding(s, t, 0.9,
                  fmt::format("rank {} wrote nothing for {} after t={} (heartbeats every {}): the process is stopped "
                              "(SIGSTOP, a paused host) or cannot write",
                              rank, secs(now - s.latest_t), secs(s.latest_t), secs(s.heartbeat_interval()))),
          Kind::silent);
  }

  // stale logging: the logged step is frozen, so the detected step is the estimated true one.
  void offer_stale(int rank, double t, std::optional<int64_t> opt, const RankClock& s) {
    std::string line = fmt::format("step {} logged {} times in a row by rank {}", s.stale_step, kStaleRepeats, rank);
    if (finite(s.stale_t0) && finite(t)) line += fmt::format(" over {} of wall clock", secs(t - s.stale_t0));
    if (s.opt0 && opt) line += fmt::format(" while opt_step advanced {} -> {}", *s.opt0, *opt);
    Finding f = finding(s, t, 0.85, line + ": the logged step/loss are stale");
    f.onset_step = s.stale_step + 1;
    f.detected_step = s.stale_step + (kStaleRepeats - 1);
    offer(rank, t, std::move(f), Kind::stale);
  }

  void offer(int rank, double pos, Finding f, Kind k) {
    if (k == Kind::silent) f.rank = rank;  // the silent rank is the one to look at
    gate_.offer(rank, pos, std::move(f));
    if (gate_.candidate_rank() == rank && gate_.candidate_position() == (finite(pos) ? pos : gate_.position(rank)))
      kind_ = k;
  }

  // "0-516,518-1023": a thousand waiting ranks in a line a person can read (rs sorted ascending).
  static std::string rank_ranges(const std::vector<int>& rs) {
    std::string out;
    for (size_t i = 0; i < rs.size();) {
      size_t j = i;
      while (j + 1 < rs.size() && rs[j + 1] == rs[j] + 1) ++j;
      out += (out.empty() ? "" : ",") + (j - i >= 2 ? fmt::format("{}-{}", rs[i], rs[j]) : std::to_string(rs[i]));
      if (j - i == 1) out += "," + std::to_string(rs[j]);
      i = j + 1;
    }
    return out;
  }

  // The committed candidate, with every rank's heartbeat phase at its t (per-rank data: deterministic),
  // the odd ones out first: "rank 1 phase=compute, ranks 0,2,3 phase=collective"; and the ranks that
  // have written nothing since before it, for kSilentNamedBeats intervals by `clock` (NaN: the detection):
  // "rank 1 silent since t=12.31 s" (a stopped host, not a rank stuck in compute).
  void commit(double clock) {
    final_ = gate_.finding();
    if (!final_ || kind_ == Kind::stale || !any_hb_) return;
    std::map<std::string, std::vector<int>> by_phase;
    std::vector<std::pair<int, double>> silent;
    int beating = 0;
    const double at = final_->detected_t;
    // Record-driven commits judge at the detection itself, so that the evidence does not depend on how
    // far the other ranks' records have been read; the launcher's clock and the end of the run are facts.
    const double now = finite(clock) ? clock : at;
    for (const auto& [rank, s] : ranks_) {
      // silent: nothing since before the detection, and nothing for two heartbeats by now
      if ((!s.ended || s.stopped) && s.beats() && finite(s.latest_t) && s.latest_t < at &&
          now - s.latest_t > kSilentNamedBeats * s.heartbeat_interval()) {
        silent.emplace_back(rank, s.latest_t);
        continue;
      }
      ++beating;
      if (auto ph = s.phase_at(at)) by_phase[*ph == kPhaseNone ? "?" : phase_name(*ph)].push_back(rank);
    }
    std::vector<std::pair<std::string, std::vector<int>>> groups(by_phase.begin(), by_phase.end());
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() != b.second.size() ? a.second.size() < b.second.size() : a.second[0] < b.second[0];
    });
    std::string line = kind_ == Kind::hang && beating ? "heartbeats continue; " : "";
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& [ph, rs] = groups[i];
      line += fmt::format("{}{} {} phase={}", i ? ", " : "", rs.size() > 1 ? "ranks" : "rank", rank_ranges(rs), ph);
    }
    if (!silent.empty() && beating == 0) {
      double since = silent.front().second;
      for (const auto& [r, t] : silent) since = std::max(since, t);
      line += fmt::format("{}no rank has written a record since t={}", line.empty() ? "" : "; ", secs(since));
    } else if (!silent.empty()) {
      std::vector<int> rs;
      for (const auto& [r, t] : silent) rs.push_back(r);
      line += fmt::format("{}{} {} silent since t={}", line.empty() ? "" : "; ", rs.size() > 1 ? "ranks" : "rank",
                          rank_ranges(rs), secs(silent.front().second));
    }
    if (!line.empty()) final_->evidence.front() += "; " + line;
  }

  PerRank<RankClock> ranks_;
  RankGate gate_;
  Kind kind_ = Kind::hang;
  std::optional<Finding> final_;
  bool any_records_ = false, any_t_ = false, any_hb_ = false;
  int world_;
  std::vector<std::string> other_phases_;  // phase names beyond the watchdog's, by id - kOtherPhase
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("run_not_alive", RunNotAlive);

}  // namespace flatline
