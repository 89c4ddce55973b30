// RankClocks: run_not_alive's bookkeeping in wall-clock time, one column per field indexed by rank
// (docs/DESIGN.md §2 "Passes over blocks"): each rank's step records (last step, step intervals), its
// watchdog heartbeats (interval, phase history), its pauses (checkpoint / eval) and restarts, and the
// stale-logging counter. The rules and their thresholds are documented in run_not_alive.cpp; this file
// only keeps the state they read.
//
// Layout. What a plain step row or a quiet heartbeat reads and writes is a column of 8-byte values
// (`last_step_t[r]`, `latest_t[r]`, ...), so that a block's plain rows are one loop over contiguous arrays
// (run_not_alive.cpp: plain_rows_ok, plain_rows). Units: times in s of the stream's clock, steps as
// logged, counts as counts. Three rings, each filled in push order (push c goes to slot c mod capacity,
// overwriting the oldest once full):
// - step intervals, kStepRing per rank, slot k of rank r at step_ring()[k * ring_stride() + r]: when every
//   rank of a block has pushed as many, the block's intervals are one contiguous row;
// - heartbeat spacings, kBeatRing per rank at [r * kBeatRing + k]; a quiet heartbeat does not push its
//   spacing: the spacings of the beats remembered since the ring last took any in are taken from the
//   phase history when the ring is next read or pushed (settle_hb);
// - the phase history, (t, phase id) of the last phase_cap heartbeats, in phase_slots (a power of two
//   above phase_cap) per rank at [r * phase_slots + k].
// The rings' minimum (the fast deadline test) and median (the deadline) are computed when a rule asks,
// the minimum cached until the next push. The stale-logging run a plain row starts is one bit (kFresh)
// until a rule reads or moves its columns (settle). Rarely written values (first_t, pause_t,
// first_step_s) are columns too, read only off the fast path.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "core/stats.h"
#include "telemetry/block.h"
#include "telemetry/record.h"

namespace flatline::detail {

// The watchdog's phases as small ids (PhaseId, known_phase, kPhaseNames): telemetry/block.h.
inline bool pause_phase(uint8_t id) { return id == kPhaseCheckpoint || id == kPhaseEval; }
inline bool training_phase(uint8_t id) { return id <= kPhaseOptimizer; }
inline double later(double a, double b) { return !std::isfinite(a) ? b : !std::isfinite(b) ? a : std::max(a, b); }

class RankClocks {
 public:
  static constexpr double kDefaultHeartbeat = 0.5;  // s, until two heartbeats are seen
  static constexpr double kDeadGap = 2.0;           // s: a heartbeat gap this long and
  static constexpr double kDeadBeats = 4.0;         //    this many intervals: a new process
  static constexpr size_t kStepRing = 64;           // step intervals kept per rank (the median's window)
  static constexpr size_t kBeatRing = 32;           // heartbeat spacings kept per rank
  // Heartbeats kept for the evidence line: kPhaseBudget over all ranks, between kMinPhaseHistory and
  // kMaxPhaseHistory per rank (4096 at 1024 ranks, 256 at 16,384: 9 bytes each, 37 MB; stored in twice
  // as many slots, the next power of two above it: 74 MB).
  static constexpr size_t kPhaseBudget = size_t{1} << 22, kMinPhaseHistory = 64, kMaxPhaseHistory = 4096;
  static size_t phase_history(int world) {
    const size_t per = world > 0 ? kPhaseBudget / static_cast<size_t>(world) : kMaxPhaseHistory;
    return std::clamp(per, kMinPhaseHistory, kMaxPhaseHistory);
  }
  // Bits of `bits[r]`.
  static constexpr uint64_t kWindow = 1u << 0;         // inside checkpoint_save..next step / eval_start..eval_end
  static constexpr uint64_t kEvalWindow = 1u << 1;     // ...and that window is eval's
  static constexpr uint64_t kStallReported = 1u << 2;  // a late heartbeat was reported since the last step
  static constexpr uint64_t kEnded = 1u << 3;          // its last record ends its stream (run_end, error, ...)
  static constexpr uint64_t kStopped = 1u << 4;        // ...and that was the launcher's `stopped`: it went silent
  static constexpr uint64_t kSilenceOffered = 1u << 5; // a silence candidate was offered since its last record
  static constexpr uint64_t kHasOpt0 = 1u << 6;        // opt0[r] holds a value (else nullopt)
  static constexpr uint64_t kHasPrevOpt = 1u << 7;     // prev_opt[r] holds a value
  // The last step record was a plain row written by a block pass: stale_n[r] = 1, stale_t0[r] = prev_t[r]
  // = last_step_t[r] and opt0[r] = prev_opt[r] hold although those columns were not written (settle()
  // writes them; every rule that reads or moves them settles first).
  static constexpr uint64_t kFresh = 1u << 8;
  static constexpr uint64_t kStepClears = kWindow | kEvalWindow | kStallReported | kEnded | kStopped | kSilenceOffered;

  // world: the ranks expected (0: unknown), given room for at once.
  explicit RankClocks(int world = 0)
      : phase_cap_(phase_history(world)), phase_slots_(pow2_at_least(phase_cap_ + 1)) {
    if (world > 0) reserve(static_cast<size_t>(world));
  }

  // ---- per-rank columns (index: rank; size(): ranks 0..size()-1 have columns, present() says which
  // have shown a record)
  std::vector<int64_t> last_step;     // the last step record's logged step (also the stale run's step)
  std::vector<int64_t> since_start;   // step records since a (re)start
  std::vector<int64_t> records_before;  // step records before the last (re)start (records(): all of them)
  std::vector<int64_t> stale_n;       // the current run of step records logging last_step (t advancing); kFresh
  std::vector<int64_t> opt0, prev_opt;  // opt_step of the stale run's first record (kFresh) / of the last one with it
  std::vector<double> last_step_t;    // s: the last step record with a t (NaN after a restart)
  std::vector<double> latest_t;       // s: the latest t of any record
  std::vector<double> last_hb_t;      // s: the last heartbeat (NaN after a restart)
  std::vector<double> stale_t0;       // s: t of the stale run's first record (NaN: it had none); kFresh
  std::vector<double> prev_t;         // s: t of the last step record that had one (kept over a restart); kFresh
  std::vector<uint64_t> bits;         // kWindow, ...
  std::vector<double> first_t;        // s: the first t of any record
  std::vector<double> first_step_s;   // s: the (re)start to its first step record: how long a step took at most
  std::vector<double> pause_t;        // s: the end of the last pause (or a restart)
  std::vector<int64_t> step_pushes;   // values pushed into the step ring so far
  mutable std::vector<int64_t> hb_pushes;  // values pushed into the spacing ring so far (settle_hb() first)

  size_t size() const { return last_step.size(); }
  int64_t records(int r) const {  // step records seen
    return records_before[static_cast<size_t>(r)] + since_start[static_cast<size_t>(r)];
  }
  // The stale-run columns written out where kFresh stands for them.
  void settle(int r) {
    const size_t i = static_cast<size_t>(r);
    if (!(bits[i] & kFresh)) return;
    stale_n[i] = 1;
    stale_t0[i] = prev_t[i] = last_step_t[i];
    opt0[i] = prev_opt[i];
    bits[i] &= ~kFresh;
  }
  bool present(int r) const { return static_cast<size_t>(r) < present_.size() && present_[static_cast<size_t>(r)]; }
  bool empty() const { return n_present_ == 0; }
  // Rank r present (columns grown to it as needed).
  void see(int r) {
    const size_t i = static_cast<size_t>(r);
    if (i >= size()) grow(i + 1);
    if (!present_[i]) present_[i] = 1, ++n_present_;
  }
  // Ranks 0..n-1 present (a block in lockstep has them all).
  void present_upto(int n) {
    if (n <= upto_) return;
    see(n - 1);
    for (int r = 0; r < n; ++r) see(r);
    upto_ = n;
  }
  template <class F>
  void for_each(F f) const {  // f(rank) for every present rank, in rank order
    for (size_t i = 0; i < present_.size(); ++i)
      if (present_[i]) f(static_cast<int>(i));
  }

  bool has(int r, uint64_t bit) const { return bits[static_cast<size_t>(r)] & bit; }
  void set(int r, uint64_t bit, bool on) {
    uint64_t& b = bits[static_cast<size_t>(r)];
    b = on ? b | bit : b & ~bit;
  }

  // ---- the rings
  size_t step_ivs(int r) const { return std::min<size_t>(static_cast<size_t>(step_pushes[static_cast<size_t>(r)]), kStepRing); }
  size_t hb_ivs(int r) const {
    settle_hb(r);
    return std::min<size_t>(static_cast<size_t>(hb_pushes[static_cast<size_t>(r)]), kBeatRing);
  }
  // The spacings of the quiet heartbeats remembered since the ring last took any in (the newest
  // phase_count_ - hb_synced_ of the phase history: each one's spacing to the beat before it), pushed.
  // A quiet beat only goes into the phase history; whatever reads the ring or pushes into it settles first.
  void settle_hb(int r) const {
    const size_t i = static_cast<size_t>(r);
    const int64_t pending = phase_count_[i] - hb_synced_[i];
    if (pending == 0) return;
    const int64_t keep = std::min<int64_t>(pending, static_cast<int64_t>(kBeatRing));
    hb_pushes[i] += pending - keep;  // overwritten by the newer ones: counted, not written
    for (int64_t q = keep; q >= 1; --q) {  // oldest first
      const int64_t c = phase_count_[i] - q;
      const double gap = phase_t_[i * phase_slots_ + (static_cast<size_t>(c) & (phase_slots_ - 1))] -
                         phase_t_[i * phase_slots_ + (static_cast<size_t>(c - 1) & (phase_slots_ - 1))];
      hb_ring_[i * kBeatRing + (static_cast<size_t>(hb_pushes[i]++) & (kBeatRing - 1))] = gap;
    }
    hb_synced_[i] = phase_count_[i];
  }
  double step_iv_median(int r) const {
    double s[kStepRing];
    return median_in_place(s, s + step_ivs_into(r, s));
  }
  double step_iv_max(int r) const {
    double s[kStepRing];
    const size_t n = step_ivs_into(r, s);
    return n ? *std::max_element(s, s + n) : std::nan("");
  }
  double step_iv_min(int r) const {
    const size_t i = static_cast<size_t>(r);
    if (step_pushes[i] == 0) return std::nan("");
    if (step_min_[i].at != step_pushes[i]) {
      double s[kStepRing];
      step_min_[i] = {*std::min_element(s, s + step_ivs_into(r, s)), step_pushes[i]};
    }
    return step_min_[i].v;
  }
  double hb_iv_min(int r) const {
    settle_hb(r);
    const size_t i = static_cast<size_t>(r);
    if (hb_pushes[i] == 0) return std::nan("");
    if (hb_min_[i].at != hb_pushes[i]) {
      const double* v = &hb_ring_[i * kBeatRing];
      hb_min_[i] = {*std::min_element(v, v + hb_ivs(r)), hb_pushes[i]};
    }
    return hb_min_[i].v;
  }
  double heartbeat_interval(int r) const {
    if (!hb_ivs(r)) return kDefaultHeartbeat;
    double s[kBeatRing];
    const double* v = &hb_ring_[static_cast<size_t>(r) * kBeatRing];
    std::copy(v, v + hb_ivs(r), s);  // core/stats.h, on a copy
    return median_in_place(s, s + hb_ivs(r));
  }
  void push_step_iv(int r, double v) {
    if (!std::isfinite(v)) return;
    const size_t i = static_cast<size_t>(r);
    aligned_ = std::min(aligned_, i);  // ranks before it still agree
    step_ring_[(static_cast<size_t>(step_pushes[i]++) & (kStepRing - 1)) * stride_ + i] = v;
  }
  void push_hb_iv(int r, double v) {  // (after settle_hb)
    if (!std::isfinite(v)) return;
    const size_t i = static_cast<size_t>(r);
    hb_ring_[i * kBeatRing + (static_cast<size_t>(hb_pushes[i]++) & (kBeatRing - 1))] = v;
  }

  bool beating(int r) const { return std::isfinite(last_hb_t[static_cast<size_t>(r)]); }  // its watchdog has beaten
  // The time the step deadline counts from: the last step or the end of the last pause.
  double reference(int r) const {
    const size_t i = static_cast<size_t>(r);
    const double ref = later(last_step_t[i], pause_t[i]);
    return std::isfinite(ref) ? ref : first_t[i];
  }

  void restart(int r, double t) {
    settle(r);
    const size_t i = static_cast<size_t>(r);
    last_step_t[i] = last_hb_t[i] = std::nan("");
    records_before[i] += since_start[i];
    since_start[i] = 0;
    pause_t[i] = t;
    bits[i] &= ~(kWindow | kEvalWindow | kStallReported);
  }

  // Called first for every record with a finite t.
  void clock(int r, double t) {
    const size_t i = static_cast<size_t>(r);
    if (std::isfinite(latest_t[i]) && t < latest_t[i] - 1.0) restart(r, t);  // the clock went back
    if (!std::isfinite(first_t[i])) first_t[i] = t;
  }

  // A step record (t NaN when it has none; opt_step when has_opt). Returns the length of the run of
  // records logging this same step while t (and opt_step) advanced: 1 for a new step.
  int64_t on_step(int r, double t, int64_t step, bool has_opt, int64_t opt) {
    settle(r);
    const size_t i = static_cast<size_t>(r);
    const bool has_t = std::isfinite(t);
    if (has_t && since_start[i] == 0 && std::isfinite(reference(r))) first_step_s[i] = t - reference(r);
    if (has_t && std::isfinite(last_step_t[i]) && t > last_step_t[i]) push_step_iv(r, t - last_step_t[i]);
    if (records(r) > 0 && step == last_step[i]) {
      const bool t_known = has_t && std::isfinite(prev_t[i]), opt_known = has_opt && (bits[i] & kHasPrevOpt);
      const bool advancing =
          (t_known || opt_known) && (!t_known || t > prev_t[i]) && (!opt_known || opt > prev_opt[i]);
      if (advancing) ++stale_n[i];  // else a duplicated line: ignored
    } else {
      stale_n[i] = 1;
      stale_t0[i] = t;
      opt0[i] = opt;
      set(r, kHasOpt0, has_opt);
    }
    if (has_t) prev_t[i] = last_step_t[i] = t;
    if (has_opt) prev_opt[i] = opt, bits[i] |= kHasPrevOpt;
    last_step[i] = step;
    ++since_start[i];
    bits[i] &= ~(kStallReported | kWindow | kEvalWindow);  // a step completed: any pause is over
    return stale_n[i];
  }

  // A heartbeat with a finite t and its phase id. Returns false while the rank is paused (phase
  // checkpoint/eval, inside a pause window), true when its step deadline applies.
  bool on_heartbeat(int r, double t, uint8_t phase) {
    settle_hb(r);
    const size_t i = static_cast<size_t>(r);
    // gap > max(kDeadGap, kDeadBeats x interval), the median only when the gap exceeds kDeadGap
    const double gap = t - last_hb_t[i];
    if (std::isfinite(last_hb_t[i]) && gap > kDeadGap && gap > kDeadBeats * heartbeat_interval(r))
      restart(r, t);  // the watchdog itself stopped: the process was gone, this is a new one
    else if (std::isfinite(last_hb_t[i]) && t > last_hb_t[i])
      push_hb_iv(r, t - last_hb_t[i]);
    last_hb_t[i] = t;
    remember_phase(r, t, phase);
    hb_synced_[i] = phase_count_[i];  // (its spacing, if any, is in the ring)
    if (pause_phase(phase)) {
      pause_t[i] = t;
      return false;
    }
    if (bits[i] & kWindow) {
      if ((bits[i] & kEvalWindow) || !training_phase(phase)) return false;
      bits[i] &= ~kWindow;  // back to training after a checkpoint save: the deadline restarts here
      pause_t[i] = t;
    }
    return true;
  }

  // An event at t (the record's, or the latest seen when it has none).
  void on_event(int r, const Record& rec, double t) {
    const size_t i = static_cast<size_t>(r);
    if (rec.name == event::checkpoint_save || rec.name == event::eval_start) {
      bits[i] |= kWindow;
      set(r, kEvalWindow, rec.name == event::eval_start);
      pause_t[i] = later(pause_t[i], t);
    } else if (rec.name == event::eval_end) {
      bits[i] &= ~(kWindow | kEvalWindow);
      pause_t[i] = later(pause_t[i], t);
    } else if (rec.name == event::run_start || rec.name == event::checkpoint_load || rec.name == event::resume ||
               rec.name == event::stop_for_restart) {
      restart(r, t);
    }
  }

  void remember_phase(int r, double t, uint8_t id) {
    const size_t i = static_cast<size_t>(r), k = i * phase_slots_ + (static_cast<size_t>(phase_count_[i]++) & (phase_slots_ - 1));
    phase_t_[k] = t;
    phase_id_[k] = id;
  }
  // The phase id of the latest heartbeat at or before t (nullopt when none is remembered).
  std::optional<uint8_t> phase_at(int r, double t) const {
    const size_t i = static_cast<size_t>(r), base = i * phase_slots_, count = static_cast<size_t>(phase_count_[i]);
    for (size_t k = 0; k < std::min(count, phase_cap_); ++k) {  // newest first
      const size_t j = base + ((count - 1 - k) & (phase_slots_ - 1));
      if (phase_t_[j] <= t) return phase_id_[j];
    }
    return std::nullopt;
  }

  // clock(r, t) and on_heartbeat(r, t, phase) for the common heartbeat at fleet scale, when it has nothing
  // to judge: a training phase outside any pause window, the rank's clock not gone back (t >= latest_t - 1),
  // the watchdog's last beat less than kDeadGap before (no restart), and t no later than the last step
  // + kMin (kMin <= every step deadline, so it cannot be late: the caller's maybe_late() would say no).
  // Also moves latest_t. Returns false, having done nothing, for any other heartbeat. (latest_t finite
  // implies first_t finite: both are set from the first finite t.)
  bool quiet_beat(int r, double t, uint8_t phase, double kMin) {
    const size_t i = static_cast<size_t>(r);
    const double gap = t - last_hb_t[i];
    if (!(gap > 0 && gap <= kDeadGap && t >= latest_t[i] - 1.0 && t <= last_step_t[i] + kMin) ||
        (bits[i] & kWindow) || !training_phase(phase))
      return false;  // (a NaN compares false: last_hb_t, latest_t and last_step_t are finite here)
    bits[i] &= ~(kStopped | kSilenceOffered);
    last_hb_t[i] = t;
    remember_phase(r, t, phase);  // (its spacing gap: settle_hb)
    latest_t[i] = latest_t[i] < t ? t : latest_t[i];
    return true;
  }

  // quiet_beat() for each beat of a run of n at t0, t0 + dt, ... (block.h), when every one of them would
  // be quiet; returns false, having done nothing, otherwise. The run is judged from its first beat (the
  // gap from the last one, the clock, the pause window), its last (no later than the last step + kMin:
  // the times only grow) and its spacings; only the values the rings keep are written (the last
  // kBeatRing spacings, the last phase_cap phases). Its last beat's time is returned in *t_last.
  bool quiet_run(int r, double t0, double dt, int n, uint8_t phase, double kMin, double* t_last) {
    if (n == 1) {
      *t_last = t0;
      return quiet_beat(r, t0, phase, kMin);
    }
    const size_t i = static_cast<size_t>(r);
    const double gap0 = t0 - last_hb_t[i];
    if (!(n > 1 && gap0 > 0 && gap0 <= kDeadGap && t0 >= latest_t[i] - 1.0) || (bits[i] & kWindow) ||
        !training_phase(phase))
      return false;
    // the times as the watchdog adds them (t += dt), each spacing within (0, kDeadGap]
    double t = t0;
    for (int k = 1; k < n; ++k) {
      const double next = t + dt, gap = next - t;
      if (!(gap > 0 && gap <= kDeadGap)) return false;
      t = next;
    }
    if (!(t <= last_step_t[i] + kMin)) return false;
    *t_last = t;
    // Every beat is quiet: into the phase history, the ones it keeps (at least the last kBeatRing + 1,
    // whose spacings settle_hb reads).
    static_assert(kMinPhaseHistory > kBeatRing, "settle_hb reads kBeatRing + 1 beats of the history");
    const size_t keep = std::min<size_t>(static_cast<size_t>(n), phase_cap_);
    t = t0;
    for (size_t k = 0; k < static_cast<size_t>(n); ++k, t += dt) {
      if (k + keep >= static_cast<size_t>(n)) remember_phase(r, t, phase);
      else skip_phase(r);
    }
    bits[i] &= ~(kStopped | kSilenceOffered);
    last_hb_t[i] = *t_last;
    latest_t[i] = latest_t[i] < *t_last ? *t_last : latest_t[i];
    return true;
  }

  // A block in lockstep's plain rows (run_not_alive.cpp: plain_rows_ok, plain_rows) write the step
  // ring directly: its slot k of rank r is step_ring()[k * ring_stride() + r], so that when every rank
  // of the block has pushed as many intervals (the usual case) one slot's values are contiguous.
  double* step_ring() { return step_ring_.data(); }
  // The phase history's columns, for a pass that keeps their pointers in registers (a quiet beat: its
  // t and phase id at slot count++, nothing else; settle_hb takes its spacing).
  struct PhaseRing {
    double* t;        // [r * slots + k]
    uint8_t* id;      // [r * slots + k]
    int64_t* count;   // [r]: heartbeats remembered; the next goes to slot count & (slots - 1)
    size_t slots;     // a power of two
  };
  PhaseRing phase_ring() { return {phase_t_.data(), phase_id_.data(), phase_count_.data(), phase_slots_}; }
  size_t ring_stride() const { return stride_; }
  std::vector<double>& scratch() { return scratch_; }
  // Whether ranks 0..n-1 have pushed as many step intervals each (one slot of the step ring is theirs
  // next). Known without a scan while no push but a whole block's has come since the last scan.
  bool steps_aligned(size_t n) {
    if (n <= aligned_) return true;
    const int64_t* __restrict p = step_pushes.data();
    uint64_t odd = 0;
    for (size_t i = 0; i < n; ++i) odd += p[i] != p[0];  // (a loop that vectorises)
    if (odd == 0) aligned_ = n;
    return odd == 0;
  }
  void pushed_upto(size_t n) { aligned_ = std::min(aligned_, n); }  // ranks 0..n-1 pushed one each

 private:
  static size_t pow2_at_least(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }
  void reserve(size_t n) {  // room for ranks 0..n-1, so that columns grow without copying
    for (auto* v : {&last_step, &records_before, &since_start, &stale_n, &opt0, &prev_opt, &step_pushes, &hb_pushes})
      v->reserve(n);
    for (auto* v : {&last_step_t, &latest_t, &last_hb_t, &stale_t0, &prev_t, &first_t, &first_step_s, &pause_t})
      v->reserve(n);
    bits.reserve(n), step_min_.reserve(n), hb_min_.reserve(n), hb_ring_.reserve(n * kBeatRing);
    phase_t_.reserve(n * phase_slots_), phase_id_.reserve(n * phase_slots_), phase_count_.reserve(n);
    present_.reserve(n);
    step_ring_.assign(kStepRing * n, 0.0);
    stride_ = n;
  }
  void grow(size_t n) {
    const double nan = std::nan("");
    last_step.resize(n, 0), records_before.resize(n, 0), since_start.resize(n, 0), stale_n.resize(n, 0);
    opt0.resize(n, 0), prev_opt.resize(n, 0);
    last_step_t.resize(n, nan), latest_t.resize(n, nan), last_hb_t.resize(n, nan), stale_t0.resize(n, nan);
    prev_t.resize(n, nan), first_t.resize(n, nan), first_step_s.resize(n, nan), pause_t.resize(n, nan);
    bits.resize(n, 0);
    step_pushes.resize(n, 0), hb_pushes.resize(n, 0), hb_synced_.resize(n, 0);
    step_min_.resize(n, {0, -1}), hb_min_.resize(n, {0, -1});
    if (n > stride_) {  // the step ring's slots are rows of stride_ ranks: laid out again, wider
      const size_t wider = std::max(n, 2 * stride_);
      std::vector<double> ring(kStepRing * wider, 0.0);
      for (size_t k = 0; k < kStepRing; ++k)
        std::copy(step_ring_.begin() + static_cast<long>(k * stride_),
                  step_ring_.begin() + static_cast<long>((k + 1) * stride_), ring.begin() + static_cast<long>(k * wider));
      step_ring_.swap(ring);
      stride_ = wider;
    }
    hb_ring_.resize(n * kBeatRing, 0);
    phase_t_.resize(n * phase_slots_, 0), phase_id_.resize(n * phase_slots_, 0);
    phase_count_.resize(n, 0);
    present_.resize(n, 0);
  }
  size_t step_ivs_into(int r, double* s) const {  // rank r's step intervals copied into s[0..returned)
    const size_t n = step_ivs(r);
    for (size_t k = 0; k < n; ++k) s[k] = step_ring_[k * stride_ + static_cast<size_t>(r)];
    return n;
  }
  struct Min {
    double v;
    int64_t at;  // the push count it was computed at (-1: never)
  };
  void skip_phase(int r) { ++phase_count_[static_cast<size_t>(r)]; }  // written and overwritten within one run

  size_t phase_cap_, phase_slots_;
  size_t stride_ = 0;                        // ranks per row of step_ring_ (>= size())
  size_t aligned_ = 0;                       // ranks 0..aligned_-1 have as many step pushes each
  std::vector<double> step_ring_;  // [slot * stride_ + rank]
  mutable std::vector<double> hb_ring_;  // [rank * kBeatRing + slot] (settle_hb writes it)
  mutable std::vector<Min> step_min_, hb_min_;
  // (t, phase id) of rank r's heartbeats in slots [r * phase_slots_, (r + 1) * phase_slots_), heartbeat c
  // (counted from 0) in slot c & (phase_slots_ - 1); the last min(phase_count_[r], phase_cap_) are the
  // history. phase_slots_: a power of two above phase_cap_, so that a slot is a mask away and the slot the
  // next heartbeat goes to holds none of the history: a block pass writes it before it knows whether it
  // takes the beat (the count moves only if it does).
  std::vector<double> phase_t_;
  std::vector<uint8_t> phase_id_;
  std::vector<int64_t> phase_count_;
  mutable std::vector<int64_t> hb_synced_;  // phase_count_ when the spacing ring last took in rank r's beats
  std::vector<uint8_t> present_;
  size_t n_present_ = 0;
  int upto_ = 0;
  std::vector<double> scratch_;
};

}  // namespace flatline::detail
