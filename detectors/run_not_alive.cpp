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
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include <fmt/ranges.h>

#include "core/protocol.h"
#include "detectors/rank_clock.h"
#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

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

// RankClocks' plain_step for rows [0, n) of a block in lockstep (row i is rank i, with a finite t), read
// from its columns: ok[i] = 1 where row i is plain, else 0 (not written for kBeat); returns how many are.
// Plain: a step other than the last one, after the first step since the (re)start, with t later than the
// last step's (a finite interval) and not a second behind the rank's latest record (last_step_t finite
// implies first_t and latest_t finite: every finite t goes through clock() first).
// kBeat: rank i may have one heartbeat before its row, at beat[i] (NaN: none), of a training phase and
// outside a pause window (the caller's test); then ok[i] also needs it quiet (RankClocks::quiet_beat, with
// kMinStallS) and the row is judged after it.
// Branch-free over 64-bit columns, out of line, so that GCC vectorises it (docs/DESIGN.md §2 "Passes over
// blocks").
template <bool kBeat>
__attribute__((noinline)) size_t plain_rows_ok(size_t n, const double* __restrict t, const int64_t* __restrict step,
                                               const int64_t* __restrict since, const int64_t* __restrict last,
                                               const double* __restrict last_t, const double* __restrict latest,
                                               const double* __restrict beat,
                                               const double* __restrict last_hb, uint64_t* __restrict ok) {
  uint64_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    double lat = latest[i];
    uint64_t good = 1;
    if constexpr (kBeat) {
      const double bt = beat[i], gap = bt - last_hb[i];
      uint64_t quiet = gap > 0;
      quiet &= gap <= RankClocks::kDeadGap;
      quiet &= bt >= lat - 1.0;
      quiet &= bt <= last_t[i] + kMinStallS;
      good = quiet | (bt != bt);
      lat = lat < bt ? bt : lat;  // (a NaN beat: unchanged)
    }
    const double iv = t[i] - last_t[i];  // > 0 exactly when t[i] > last_t[i] (gradual underflow)
    good &= since[i] > 0;
    good &= iv > 0;
    good &= iv < std::numeric_limits<double>::infinity();
    good &= t[i] >= lat - 1.0;
    good &= step[i] != last[i];
    if constexpr (!kBeat) ok[i] = good;  // (plain_block needs only the count)
    count += good;
  }
  return count;
}

// What RankClocks::plain_step leaves for rows [0, n) of a block in lockstep, every one of them plain
// (plain_rows_ok): the step and its t, the stale run restarted at it (kFresh; opt_step from opt where
// flags has kOptStep), the step record count, the pause and end-of-stream marks cleared (a step opens the stream
// again), latest_t; the interval t - last_t into iv[i] (the step ring's slot when every rank is at the same
// one, else a scratch column) and a push counted. kBeat: first what quiet_beat leaves of rank i's heartbeat
// at beat[i] (NaN: none) in last_hb and latest, its phase history's count `beats` moved on (the caller
// has written the slot; its spacing: RankClocks::settle_hb), and the gate's positions `pos` moved to the
// beat and the row (else the caller moves them). Branch-free, out of line: it
// vectorises.
template <bool kBeat>
__attribute__((noinline)) void plain_rows(size_t n, const double* __restrict t, const int64_t* __restrict step,
                                          const uint64_t* __restrict flags, const int64_t* __restrict opt,
                                          const double* __restrict beat, double* __restrict last_hb,
                                          double* __restrict last_t, double* __restrict latest,
                                          int64_t* __restrict last, int64_t* __restrict prev_opt,
                                          int64_t* __restrict since, uint64_t* __restrict bits,
                                          int64_t* __restrict pushes, double* __restrict iv,
                                          double* __restrict pos, int64_t* __restrict beats) {
  constexpr uint64_t clears = RankClocks::kStepClears | RankClocks::kHasOpt0,
                     opts = RankClocks::kHasOpt0 | RankClocks::kHasPrevOpt;
  for (size_t i = 0; i < n; ++i) {
    const double ti = t[i];
    double lat = latest[i];
    if constexpr (kBeat) {
      const double bt = beat[i];
      last_hb[i] = bt == bt ? bt : last_hb[i];
      lat = lat < bt ? bt : lat;
      double p = pos[i];
      p = p < bt ? bt : p;
      pos[i] = p < ti ? ti : p;
      beats[i] += bt == bt;
    }
    const uint64_t has = 0 - (flags[i] & StepBlock::kOptStep);  // all ones where opt_step is logged
    iv[i] = ti - last_t[i];
    last_t[i] = ti;
    last[i] = step[i];
    prev_opt[i] = static_cast<int64_t>((static_cast<uint64_t>(opt[i]) & has) | (static_cast<uint64_t>(prev_opt[i]) & ~has));
    bits[i] = (bits[i] & ~clears) | (has & opts) | RankClocks::kFresh;  // the stale run: kFresh
    ++since[i];
    ++pushes[i];
    latest[i] = lat < ti ? ti : lat;
  }
}

class RunNotAlive final : public BlockDetector {
 public:
  explicit RunNotAlive(const DetectorConfig& c)
      : clocks_(c.world_size), gate_(c.world_size, /*exact_positions=*/false) {}
  const char* cause() const override { return "run_not_alive"; }

  // Events and eval records, one at a time.
  void observe_event(const Record& r) override {
    if (r.rank < 0) return;
    any_records_ = true;
    gate_.see(r.rank);
    clocks_.see(r.rank);
    RankClocks& c = clocks_;
    const int k = r.rank;
    const bool has_t = finite(r.t);
    if (r.kind == RecordKind::event && r.name == event::stopped) {  // the launcher's word, not the rank's
      if (has_t) {
        silence_check(k, r.t);
        gate_.advance(k, r.t);
      }
      c.set(k, RankClocks::kEnded | RankClocks::kStopped, true);
      if (gate_.poll()) commit(std::nan(""));
      return;
    }
    c.set(k, RankClocks::kStopped, false);
    // A stream ends with its end event; stray heartbeats of the exiting process do not reopen it, a
    // step or a new process's start does.
    c.set(k, RankClocks::kEnded, stream_ended_after(c.has(k, RankClocks::kEnded), r));
    c.set(k, RankClocks::kSilenceOffered, false);
    if (has_t) {
      any_t_ = true;
      c.clock(k, r.t);
    }
    const size_t i = static_cast<size_t>(k);
    if (r.kind == RecordKind::event) {
      const double t = has_t ? r.t : c.latest_t[i];
      c.on_event(k, r, t);
      // a hang's words first: a watchdog timeout that then aborts the process (SIGABRT) was a hang
      if (r.name == event::error && mentions_hang(r.detail))
        offer(k, t, finding(k, t, 0.8, fmt::format("error on rank {} after step {}: {}", k, c.last_step[i], r.detail)),
              Kind::error);
      else if (r.name == event::error && mentions_death(r.detail)) {
        // Ended long after its last step (no step for 10 median steps and a minute): it hung, then was
        // killed; else it died while stepping: a crash.
        const double gap = finite(c.last_step_t[i]) && finite(t) ? t - c.last_step_t[i] : 0;
        const double median = c.step_ivs(k) ? c.step_iv_median(k) : 0;
        const bool hung = gap > std::max(60.0, 10 * median);
        offer(k, t,
              finding(k, t, 0.8,
                      hung ? fmt::format("no step for {} after step {}, then the run was ended: {}", secs(gap),
                                         c.last_step[i], r.detail)
                           : fmt::format("the run died (a crash, not a hang) after step {}: {}", c.last_step[i],
                                         r.detail)),
              Kind::error);
      }
    } else if (has_t) {
      c.pause_t[i] = r.t;  // an eval record: eval is running
    }
    if (has_t) {
      c.latest_t[i] = later(c.latest_t[i], r.t);
      gate_.advance(k, r.t);
    }
    if (gate_.poll()) commit(std::nan(""));
  }

  // A block in stream order: each heartbeat run before the row it precedes, then the row.
  // A block in lockstep (rank i on row i, finite t): its ranks are made known to the gate and the
  // per-rank columns once, and each row takes the same steps without those checks (lockstep_row).
  void observe_block(const StepBlock& b) override {
    const size_t n = b.rows(), nb = b.beats.size();
    if (b.lockstep) {
      any_records_ = any_t_ = true;
      gate_.see_all(static_cast<int>(n));
      clocks_.present_upto(static_cast<int>(n));
    }
    // In lockstep with no candidate pending, the plain rows and quiet heartbeat runs before the first
    // record that may offer a candidate go through plain_prefix(): they cannot offer one, so the rows'
    // positions are moved in one pass afterwards (positions only grow, and a poll needs a candidate: the
    // same commits; docs/DESIGN.md §2 "Passes over blocks"); the rest of the block, from that record on,
    // record by record.
    size_t i0 = 0, j = 0;
    if (b.lockstep && !gate_.has_candidate()) {
      if (plain_block(b)) return;
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

  // The records of a block in lockstep, in stream order, up to the first that is not a plain row
  // (plain_rows_ok) or a quiet heartbeat run (RankClocks::quiet_run) of a rank of the block before its
  // row; returns (i, j): rows [0, i) and heartbeat runs [0, j) taken. The rows are judged in one pass
  // first, then the runs in order (a run changes only its own rank's state, and of what a row is judged
  // by only latest_t: a row whose rank's run moved latest_t past it ends the prefix there), then the rows
  // taken are written in one pass. The rows do not move their gate positions (the caller does).
  std::pair<size_t, size_t> plain_prefix(const StepBlock& b) {
    const size_t n = b.rows(), nb = b.beats.size();
    const double* t = b.t.data();
    RankClocks& c = clocks_;
    ok_.resize(n);
    size_t bound = n;  // rows [0, bound) are plain
    if (plain_rows_ok<false>(n, t, b.step.data(), c.since_start.data(), c.last_step.data(), c.last_step_t.data(),
                             c.latest_t.data(), nullptr, nullptr, ok_.data()) != n)
      bound = static_cast<size_t>(std::find(ok_.begin(), ok_.end(), uint64_t{0}) - ok_.begin());
    // The runs: a run of one beat (the usual) is RankClocks::quiet_beat written out over the columns'
    // pointers, held in registers; a longer one goes to quiet_run.
    const StepBlock::Beats* runs = b.beats.data();
    double* __restrict last_hb = c.last_hb_t.data();
    double* __restrict latest = c.latest_t.data();
    const double* __restrict last_t = c.last_step_t.data();
    uint64_t* __restrict bits = c.bits.data();
    const RankClocks::PhaseRing ph = c.phase_ring();
    size_t j = 0;
    for (; j < nb; ++j) {
      const StepBlock::Beats& run = runs[j];
      const size_t k = static_cast<size_t>(run.rank);  // (a negative rank: beyond n)
      if (run.row > bound || !(run.row <= k && k < n) || !training_phase(run.phase)) break;
      double t_last = run.t0;
      if (run.n == 1) {
        const double gap = t_last - last_hb[k];
        bool quiet = gap > 0;
        quiet &= gap <= RankClocks::kDeadGap;
        quiet &= t_last >= latest[k] - 1.0;
        quiet &= t_last <= last_t[k] + kMinStallS;
        quiet &= !(bits[k] & RankClocks::kWindow);
        if (!quiet) break;
        bits[k] &= ~(RankClocks::kStopped | RankClocks::kSilenceOffered);
        last_hb[k] = t_last;
        latest[k] = latest[k] < t_last ? t_last : latest[k];
        const size_t slot = k * ph.slots + (static_cast<size_t>(ph.count[k]++) & (ph.slots - 1));
        ph.t[slot] = t_last;
        ph.id[slot] = run.phase;
      } else if (!c.quiet_run(run.rank, run.t0, run.dt, run.n, run.phase, kMinStallS, &t_last)) {
        break;
      }
      gate_.advance_seen(run.rank, t_last);
      if (k < bound && !(t[k] >= latest[k] - 1.0)) bound = k;
    }
    any_hb_ = any_hb_ || j > 0;
    const size_t rows = j < nb ? std::min<size_t>(bound, b.beats[j].row) : bound;
    take_rows<false>(b, rows, nullptr);
    return {rows, j};
  }

  // Rows [0, rows) of a block in lockstep, every one plain (plain_rows_ok<kBeat> said so), written
  // (plain_rows<kBeat>, with `beat`), their step intervals in the step ring: one contiguous slot when every
  // one of them has pushed as many (RankClocks::steps_aligned).
  template <bool kBeat>
  void take_rows(const StepBlock& b, size_t rows, const double* beat) {
    if (rows == 0) return;
    RankClocks& c = clocks_;
    const bool uniform = c.steps_aligned(rows);
    const size_t stride = c.ring_stride(), slot = static_cast<size_t>(c.step_pushes[0]) & (RankClocks::kStepRing - 1);
    std::vector<double>& scratch = c.scratch();
    if (!uniform) scratch.resize(rows);
    double* iv = uniform ? c.step_ring() + slot * stride : scratch.data();
    plain_rows<kBeat>(rows, b.t.data(), b.step.data(), b.flags.data(), b.opt_step.data(), beat, c.last_hb_t.data(),
                      c.last_step_t.data(), c.latest_t.data(), c.last_step.data(), c.prev_opt.data(),
                      c.since_start.data(), c.bits.data(), c.step_pushes.data(), iv,
                      kBeat ? gate_.positions() : nullptr, kBeat ? c.phase_ring().count : nullptr);
    if (!uniform) {  // each rank's own slot
      double* ring = c.step_ring();
      for (size_t i = 0; i < rows; ++i)
        ring[(static_cast<size_t>(c.step_pushes[i] - 1) & (RankClocks::kStepRing - 1)) * stride + i] = iv[i];
    }
    c.pushed_upto(rows);
  }

  // The fleet simulator's usual block in lockstep, taken whole when every record is plain: at most one
  // heartbeat per rank, a run of one beat just before its rank's row (row == rank), of a training phase.
  // The beats are laid out as a column (beat_[i]: rank i's, NaN: none), so that the rows and the beats are
  // judged in one branch-free pass (plain_rows_ok<true>) and written in another (plain_rows<true>); the
  // beats' rings (spacing, phase history) in a pass over the runs. Returns false, having changed nothing,
  // for any other block, or one with a record that is not plain (plain_prefix takes it).
  bool plain_block(const StepBlock& b) {
    const size_t n = b.rows(), nb = b.beats.size();
    const StepBlock::Beats* runs = b.beats.data();
    RankClocks& c = clocks_;
    beat_.assign(n, std::numeric_limits<double>::quiet_NaN());
    double* beat = beat_.data();
    const uint64_t* bits = c.bits.data();
    const RankClocks::PhaseRing ph = c.phase_ring();
    size_t next = 0;  // the least rank the next run may have (one per rank, in rank order)
    for (size_t j = 0; j < nb; ++j) {
      const StepBlock::Beats& run = runs[j];
      const size_t k = static_cast<size_t>(run.rank);  // (a negative rank: beyond n)
      bool fits = run.n == 1;
      fits &= run.row == k;
      fits &= k < n;
      fits &= k >= next;
      fits &= training_phase(run.phase);
      if (!fits || (bits[k] & RankClocks::kWindow)) return false;
      // (a beat without a t changes nothing a plain row leaves, so NaN, "no beat", says the same; an
      // infinite one is not quiet: plain_rows_ok says no)
      beat[k] = run.t0;
      next = k + 1;
      // into the phase history's next slot, which holds none of the history: counted only once taken
      const size_t slot = k * ph.slots + (static_cast<size_t>(ph.count[k]) & (ph.slots - 1));
      ph.t[slot] = run.t0;
      ph.id[slot] = run.phase;
    }
    if (plain_rows_ok<true>(n, b.t.data(), b.step.data(), c.since_start.data(), c.last_step.data(),
                            c.last_step_t.data(), c.latest_t.data(), beat, c.last_hb_t.data(), nullptr) != n)
      return false;
    take_rows<true>(b, n, beat);  // (the gate's positions, the beats' phase history counts)
    any_hb_ = any_hb_ || nb > 0;
    return true;
  }

  // step_row() for row i of a block in lockstep: rank i, already known, with a finite t.
  void lockstep_row(const StepBlock& b, size_t i) {
    const int r = static_cast<int>(i);
    const double t = b.t[i];
    const bool has_opt = b.flags[i] & StepBlock::kOptStep;
    clocks_.set(r, RankClocks::kStopped | RankClocks::kEnded | RankClocks::kSilenceOffered,
                false);  // a step opens the stream again
    clocks_.clock(r, t);
    if (clocks_.on_step(r, t, b.step[i], has_opt, b.opt_step[i]) == kStaleRepeats)
      offer_stale(r, t, has_opt ? std::optional<int64_t>(b.opt_step[i]) : std::nullopt);
    clocks_.latest_t[i] = later(clocks_.latest_t[i], t);
    gate_.advance_seen(r, t);
    if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
  }

  void step_row(const StepBlock& b, size_t i) {
    const int r = b.rank[i];
    if (r < 0) return;
    any_records_ = true;
    gate_.see(r);
    clocks_.see(r);
    const double t = b.t[i];
    const bool has_t = finite(t);
    clocks_.set(r, RankClocks::kStopped | RankClocks::kEnded | RankClocks::kSilenceOffered,
                false);  // a step opens the stream again
    if (has_t) {
      any_t_ = true;
      clocks_.clock(r, t);
    }
    const bool has_opt = b.flags[i] & StepBlock::kOptStep;
    if (clocks_.on_step(r, t, b.step[i], has_opt, b.opt_step[i]) == kStaleRepeats)
      offer_stale(r, t, has_opt ? std::optional<int64_t>(b.opt_step[i]) : std::nullopt);
    if (has_t) {
      clocks_.latest_t[static_cast<size_t>(r)] = later(clocks_.latest_t[static_cast<size_t>(r)], t);
      gate_.advance(r, t);
    }
    if (gate_.poll()) commit(std::nan(""));
  }

  // A run of one rank's heartbeats, beat by beat (t0, t0 + dt, ...: block.h). `known`: the rank is
  // already known to the gate and the per-rank columns (a block in lockstep that has its row).
  void beats(const StepBlock& b, const StepBlock::Beats& run, bool known) {
    const int r = run.rank;
    if (r < 0) return;
    any_records_ = true;
    any_hb_ = true;
    if (!known) gate_.see(r), clocks_.see(r);
    RankClocks& c = clocks_;
    const size_t i = static_cast<size_t>(r);
    const uint8_t phase = run.phase < kOtherPhase ? run.phase : intern(b.phase_name(run.phase));
    double t = run.t0;
    for (int k = 0; k < run.n; ++k, t += run.dt) {
      if (c.quiet_beat(r, t, phase, kMinStallS)) {  // (maybe_late: no deadline is shorter than kMinStallS)
        any_t_ = true;
        gate_.advance_seen(r, t);
        if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
        continue;
      }
      c.set(r, RankClocks::kStopped | RankClocks::kSilenceOffered, false);  // a stray heartbeat does not reopen an ended stream
      if (!finite(t)) {
        if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
        continue;
      }
      any_t_ = true;
      c.clock(r, t);
      if (c.on_heartbeat(r, t, phase) && maybe_late(t, r)) check_deadline(r, t, phase);
      c.latest_t[i] = later(c.latest_t[i], t);
      gate_.advance_seen(r, t);
      if (gate_.has_candidate() && gate_.poll()) commit(std::nan(""));
    }
  }

  void advance(double now) override {
    if (final_ || !finite(now)) return;
    clocks_.for_each([&](int rank) {
      silence_check(rank, now);
      gate_.advance(rank, now - kVisibleLatencyS);
    });
    if (gate_.poll()) commit(now);
  }

  void finish(double t_end) override {
    if (!final_ && finite(t_end)) clocks_.for_each([&](int rank) { silence_check(rank, t_end); });
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
    const RankClocks& c = clocks_;
    for (int rank = 0; static_cast<size_t>(rank) < c.size(); ++rank) {
      const size_t i = static_cast<size_t>(rank);
      if (!c.present(rank) || !c.records(rank)) continue;
      std::string d = fmt::format("steps advancing: rank {} last step {}", rank, c.last_step[i]);
      if (finite(c.last_step_t[i])) d += " at t=" + secs(c.last_step_t[i]);
      if (c.step_ivs(rank)) d += fmt::format(" (median step {})", secs(c.step_iv_median(rank)));
      d += any_hb_ ? "; heartbeats every " + secs(c.heartbeat_interval(rank))
                   : "; no heartbeats, so only stale logging was checked (log a watchdog heartbeat)";
      return {cause(), CheckState::pass, d};
    }
    return {cause(), CheckState::pass, "no step record yet"};
  }

 private:
  Finding finding(int rank, double t, double confidence, std::string evidence) const {
    Finding f;
    f.cause = cause();
    const int64_t last = clocks_.last_step[static_cast<size_t>(rank)];
    f.onset_step = last + 1;
    f.detected_step = last + 1;  // the stalled step (the one the watchdog's heartbeat names)
    f.detected_t = t;
    f.confidence = confidence;
    f.evidence.push_back(std::move(evidence));
    return f;
  }

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

  // hang: a heartbeat later than the rank's step deadline.
  static_assert(kMinStallS <= kFallbackBound && kMinStallS <= kFirstStepAllowanceS, "RankClocks::quiet_beat's bound");
  // Fast path: the bound below is at least this (a median is >= the minimum), so an earlier heartbeat
  // cannot be late; the medians are computed only for heartbeats past it.
  bool maybe_late(double t, int r) const {
    const RankClocks& c = clocks_;
    const size_t i = static_cast<size_t>(r);
    if (c.has(r, RankClocks::kStallReported)) return false;
    const bool first = c.since_start[i] == 0;  // no step yet since the (re)start
    const bool warm = c.step_ivs(r) >= kMinIntervals && !first;
    const double lower =
        first  ? kFirstStepAllowanceS
        : warm ? std::max(kMinStallS, kSlackSteps * c.step_iv_min(r) +
                                          (c.hb_ivs(r) ? c.hb_iv_min(r) : RankClocks::kDefaultHeartbeat))
               : kFallbackBound;
    return t > c.reference(r) + lower;
  }
  void check_deadline(int rank, double t, uint8_t phase) {
    if (!maybe_late(t, rank)) return;
    RankClocks& c = clocks_;
    const size_t i = static_cast<size_t>(rank);
    const double ref = c.reference(rank);
    const bool first = c.since_start[i] == 0;
    const bool warm = c.step_ivs(rank) >= kMinIntervals && !first;
    const double med = c.step_iv_median(rank);
    // Before the median: the longest step this rank has shown, its first (from the start) included.
    double longest = finite(c.first_step_s[i]) ? c.first_step_s[i] : 0;
    if (c.step_ivs(rank)) longest = std::max(longest, c.step_iv_max(rank));
    const double warming = std::max(kFallbackBound, kSlackSteps * longest + c.heartbeat_interval(rank));
    const double by_steps = first ? kFirstStepAllowanceS
                            : warm ? std::max(kMinStallS, kSlackSteps * med + c.heartbeat_interval(rank))
                                   : warming;
    // Without a phase a pause cannot be told from a hang: never less than the start-up bound.
    const double bound = std::max(by_steps, training_phase(phase) ? 0.0 : kFallbackBound);
    if (!(t > ref + bound)) return;
    c.set(rank, RankClocks::kStallReported, true);
    const double since = t - (finite(c.last_step_t[i]) ? c.last_step_t[i] : ref);
    std::string line = c.records(rank) ? fmt::format("no step for {} after step {}", secs(since), c.last_step[i])
                                         : fmt::format("no step for {} since start", secs(since));
    line += first  ? fmt::format(" (a first step's allowance {})", secs(kFirstStepAllowanceS))
            : warm ? fmt::format(" (median step {})", secs(med))
                   : fmt::format(" (3 x the longest step so far, {}, and a heartbeat)", secs(longest));
    offer(rank, t, finding(rank, t, 0.9, line), Kind::hang);
  }

  // silence: nothing from a beating rank for the bound, at the stream's clock `now`.
  double silence_bound(int rank) const {
    return std::max(kSilentBeats * clocks_.heartbeat_interval(rank), kMinSilenceS);
  }
  void silence_check(int rank, double now) {
    RankClocks& c = clocks_;
    const double latest = c.latest_t[static_cast<size_t>(rank)];
    if (c.has(rank, RankClocks::kEnded | RankClocks::kSilenceOffered) || !c.beating(rank) || !finite(latest)) return;
    const double bound = silence_bound(rank);
    if (!(now - latest > bound)) return;
    c.set(rank, RankClocks::kSilenceOffered, true);
    const double t = latest + bound;
    offer(rank, t,
          finding(rank, t, 0.9,
                  fmt::format("rank {} wrote nothing for {} after t={} (heartbeats every {}): the process is stopped "
                              "(SIGSTOP, a paused host) or cannot write",
                              rank, secs(now - latest), secs(latest), secs(c.heartbeat_interval(rank)))),
          Kind::silent);
  }

  // stale logging: the logged step is frozen, so the detected step is the estimated true one.
  void offer_stale(int rank, double t, std::optional<int64_t> opt) {
    const RankClocks& c = clocks_;
    const size_t i = static_cast<size_t>(rank);
    const int64_t stuck = c.last_step[i];
    std::string line = fmt::format("step {} logged {} times in a row by rank {}", stuck, kStaleRepeats, rank);
    if (finite(c.stale_t0[i]) && finite(t)) line += fmt::format(" over {} of wall clock", secs(t - c.stale_t0[i]));
    if (c.has(rank, RankClocks::kHasOpt0) && opt)
      line += fmt::format(" while opt_step advanced {} -> {}", c.opt0[i], *opt);
    Finding f = finding(rank, t, 0.85, line + ": the logged step/loss are stale");
    f.onset_step = stuck + 1;
    f.detected_step = stuck + (kStaleRepeats - 1);
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
    const RankClocks& c = clocks_;
    c.for_each([&](int rank) {
      // silent: nothing since before the detection, and nothing for two heartbeats by now
      const double latest = c.latest_t[static_cast<size_t>(rank)];
      if ((!c.has(rank, RankClocks::kEnded) || c.has(rank, RankClocks::kStopped)) && c.beating(rank) &&
          finite(latest) && latest < at && now - latest > kSilentNamedBeats * c.heartbeat_interval(rank)) {
        silent.emplace_back(rank, latest);
        return;
      }
      ++beating;
      if (auto ph = c.phase_at(rank, at)) by_phase[*ph == kPhaseNone ? "?" : phase_name(*ph)].push_back(rank);
    });
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

  RankClocks clocks_;  // per-rank state, by rank (detectors/rank_clock.h)
  RankGate gate_;
  Kind kind_ = Kind::hang;
  std::optional<Finding> final_;
  bool any_records_ = false, any_t_ = false, any_hb_ = false;
  std::vector<uint64_t> ok_;  // plain_prefix's scratch: 1 where a row is plain
  std::vector<double> beat_;  // plain_block's scratch: rank i's heartbeat before its row (NaN: none)
  std::vector<std::string> other_phases_;  // phase names beyond the watchdog's, by id - kOtherPhase
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("run_not_alive", RunNotAlive);

}  // namespace flatline
