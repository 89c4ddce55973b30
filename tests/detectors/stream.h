// Synthetic telemetry for detector tests. Not a third executor of the faults: the faults' effects are
// carried out by the trainer and the simulator (faults/effects.h; tests/sim/fault_effects_test.cpp and
// conformance_test.cpp hold them to it). This generator's knobs (an lr function, a batch-index function,
// missing fields, arrival orders, lost restart events) describe what a detector sees, including streams
// no fault produces (real logs lack fields, interleave oddly); its fp16 scaler is the shared LossScaler.
// A small seeded generator of per-rank record streams that
// look like the harness's (docs/DESIGN.md §3): step records with a decaying noisy loss,
// a warmup + cosine lr, grad norms, distinct batch hashes per rank per step; heartbeats every
// hb_s with the phase the rank is in; checkpoint/eval pauses, restarts, hangs and fp16 loss
// scaling. Faults are injected through the hooks of Spec. Deterministic: splitmix64 everywhere
// (std:: distributions are implementation-defined).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "detectors/detector.h"
#include "run/loss_scaler.h"
#include "telemetry/record.h"

namespace flatline::testing {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// Uniform in [0, 1) from a seed and three coordinates.
inline double unif(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  uint64_t h = mix64(mix64(mix64(seed ^ 0x51ed2701ULL) ^ a) ^ (b * 0x100000001b3ULL)) ^ (c * 0x9e3779b1ULL);
  return static_cast<double>(mix64(h) >> 11) / 9007199254740992.0;
}
// Roughly standard normal (Irwin-Hall of 4 uniforms, rescaled): bounded, platform-independent.
inline double gauss(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  double s = 0;
  for (uint64_t i = 0; i < 4; ++i) s += unif(seed, a, b, c * 8 + i + 1);
  return (s - 2.0) * std::sqrt(3.0);
}

struct Spec {
  int world = 2;
  int64_t steps = 300;
  uint64_t seed = 1;
  double step_s = 0.2, hb_s = 0.5;
  double first_step_s = -1;  // > 0: step 1 takes this long (start-up)
  // lr: warmup from 0 (HF: lr(k) = peak * k / warmup, step s trains with k = s - 1) then cosine.
  double peak_lr = 3e-3, min_lr = 3e-4;
  int64_t warmup = 20, total = -1;  // total < 0: = steps
  // precision
  bool fp16 = false;
  double init_scale = 65536;
  int initial_overflows = 0;     // fp16: the scaler's initial search
  int64_t growth_interval = 2000;
  bool overflow_after_growth = false;  // healthy: the step after a growth overflows once
  // pauses and restart
  std::set<int64_t> checkpoint_at, eval_at;
  double pause_s = 3.0;
  int64_t restart_after = -1, restart_from = -1;  // after step restart_after, resume from checkpoint step
  double restart_gap_s = 2.0, startup_s = 1.5;  // process gone, then the new one starting up
  bool restart_events = true;                     // false: a crash-restart whose events were lost
  // hang: ranks complete hang_at - 1, then hang_rank blocks in compute and the others wait in the
  // collective for hang_timeout_s; then the others log a collective-timeout error and the run ends.
  int64_t hang_at = -1;
  int hang_rank = 1;
  double hang_timeout_s = 10;
  // stale logging: from this step on, stale_rank (-1: all) logs step stale_from - 1 and its loss.
  int64_t stale_from = -1;
  int stale_rank = -1;
  // which fields exist
  bool heartbeats = true, with_t = true, lr_field = true, batch_hash = true, local_grad = true, loss_scale = true,
       update_norm = true;
  // fault hooks (after_restart: this step is trained by the resumed processes)
  std::function<double(int64_t step, bool after_restart, double healthy)> lr;
  std::function<int64_t(int64_t step, bool after_restart)> batch_index;  // default step - 1
  std::function<bool(int64_t step)> overflow;                             // fp16: extra overflow steps
  std::function<double(int64_t step)> max_scale;                          // fp16: clamp on the scale
  std::function<double(int64_t step, int rank)> local_grad_scale;         // multiplier of a rank's grad
  std::function<void(Record&)> mutate;                                    // last word on each step record
};

inline double healthy_lr(const Spec& s, int64_t step) {
  const int64_t k = step - 1, total = s.total < 0 ? s.steps : s.total;
  if (k < s.warmup) return s.peak_lr * static_cast<double>(k) / static_cast<double>(s.warmup);
  double p = static_cast<double>(k - s.warmup) / static_cast<double>(std::max<int64_t>(1, total - s.warmup));
  p = std::clamp(p, 0.0, 1.0);
  return s.min_lr + (s.peak_lr - s.min_lr) * 0.5 * (1 + std::cos(M_PI * p));
}

inline double healthy_loss(const Spec& s, int64_t step) {
  return 2.0 + 3.0 * std::exp(-static_cast<double>(step) / 100.0) + 0.03 * gauss(s.seed, 1, step);
}

// Per-rank record streams, each in the order that rank writes them.
inline std::vector<std::vector<Record>> generate(const Spec& sp) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Seg {
    double t0, t1;
    std::string phase;  // per rank when `hang` segment
    int64_t step;
  };
  struct Item {
    double t;
    int order;
    Record r;
  };
  std::vector<std::vector<Item>> items(sp.world);
  std::vector<std::vector<Seg>> segs(sp.world);
  std::vector<double> alive_until(sp.world, 0);
  int order = 0;
  auto emit = [&](int rank, double t, Record r) {
    r.rank = rank;
    r.t = t;
    items[rank].push_back({t, order++, std::move(r)});
  };
  auto event = [&](int rank, double t, const std::string& name, int64_t step, const std::string& detail = "") {
    Record r;
    r.kind = RecordKind::event;
    r.name = name;
    r.step = step;
    r.detail = detail;
    emit(rank, t, r);
  };
  auto seg = [&](double t0, double t1, const std::string& phase, int64_t step) {
    for (int r = 0; r < sp.world; ++r) segs[r].push_back({t0, t1, phase, step});
  };

  double T = 0;
  LossScaler scaler;  // the harness's and the simulator's scaler (GradScaler semantics)
  scaler.scale = sp.init_scale;
  scaler.growth_interval = sp.growth_interval;
  int64_t opt = 0, last_done = 0;
  bool resumed = false, overflow_next = false;
  std::map<int64_t, LossScaler> scale_at;  // checkpointed scaler state
  std::map<int64_t, int64_t> opt_at;
  for (int r = 0; r < sp.world; ++r) event(r, 0.0, "run_start", 0);
  int64_t step = 1;
  double frozen_loss = 0;
  while (step <= sp.steps) {
    if (step == sp.hang_at) {
      for (int r = 0; r < sp.world; ++r)
        segs[r].push_back({T, T + sp.hang_timeout_s, r == sp.hang_rank ? "compute" : "collective", step});
      T += sp.hang_timeout_s;
      for (int r = 0; r < sp.world; ++r) {
        if (r != sp.hang_rank)
          event(r, T + 0.001 * r, "error", last_done,
                "collective operation timed out after " + std::to_string(static_cast<int>(sp.hang_timeout_s)) +
                    " s (allreduce)");
        event(r, T + 0.01, "run_end", last_done);
        alive_until[r] = T + 0.01;
      }
      break;
    }
    double d = sp.step_s * (1 + 0.2 * (unif(sp.seed, 2, step, resumed) - 0.5));
    if (step == 1 && sp.first_step_s > 0) d = sp.first_step_s;
    seg(T, T + 0.1 * d, "data", step);  // heartbeats name the step in progress, as sim/trainer.cpp
    seg(T + 0.1 * d, T + 0.7 * d, "compute", step);
    seg(T + 0.7 * d, T + 0.9 * d, "collective", step);
    seg(T + 0.9 * d, T + d, "optimizer", step);
    T += d;

    // --- fp16 scaler (PyTorch GradScaler: backoff 0.5 and skip on overflow, growth 2x)
    bool overflow = false;
    if (sp.fp16) {
      if (sp.max_scale) scaler.scale = std::min(scaler.scale, sp.max_scale(step));
      overflow = (!resumed && step <= sp.initial_overflows) || (sp.overflow && sp.overflow(step)) || overflow_next;
      overflow_next = false;
    }
    const double used_scale = sp.fp16 ? scaler.scale : 1.0;
    const bool underflow = sp.fp16 && !overflow && used_scale < 1;
    if (!overflow) ++opt;
    const double lr_h = healthy_lr(sp, step);
    const double lr = sp.lr ? sp.lr(step, resumed, lr_h) : lr_h;
    const int64_t bidx = sp.batch_index ? sp.batch_index(step, resumed) : step - 1;
    const double loss_avg = healthy_loss(sp, step);
    const double gn = underflow ? 0.0 : 0.5 + 1.0 * std::exp(-static_cast<double>(step) / 80.0) +
                                            0.05 * std::fabs(gauss(sp.seed, 3, step));
    for (int r = 0; r < sp.world; ++r) {
      Record rec;
      rec.kind = RecordKind::step;
      rec.step = step;
      rec.opt_step = opt;
      rec.loss = loss_avg + 0.05 * gauss(sp.seed, 4, step, r);
      rec.loss_avg = loss_avg;
      if (sp.lr_field) rec.lr = lr;
      rec.grad_norm = overflow ? std::numeric_limits<double>::infinity() : gn;
      double local = gn * (0.9 + 0.2 * unif(sp.seed, 5, step, r));
      if (sp.local_grad_scale) local *= sp.local_grad_scale(step, r);
      if (overflow) local = std::numeric_limits<double>::infinity();
      if (sp.local_grad) rec.local_grad_norm = local;
      rec.grad_zero_frac = underflow ? 0.98 : 0.001 * unif(sp.seed, 6, step);
      rec.param_norm = 40 + 0.01 * static_cast<double>(step);
      if (sp.update_norm) rec.update_norm = overflow ? 0.0 : lr * 25 * (0.9 + 0.2 * unif(sp.seed, 7, step));
      if (sp.loss_scale) rec.loss_scale = used_scale;
      rec.overflow = overflow;
      rec.skipped = overflow;
      if (sp.batch_hash) rec.batch_hash = mix64(sp.seed * 0x1000193ULL + static_cast<uint64_t>(r) * 0x7fffULL +
                                                static_cast<uint64_t>(bidx) * 0x100000001b3ULL);
      rec.epoch = 0;
      rec.samples_seen = (bidx + 1) * 16;
      rec.step_ms = d * 1000;
      rec.comm_ms = d * 200;
      if (sp.stale_from > 0 && step >= sp.stale_from && (sp.stale_rank < 0 || sp.stale_rank == r)) {
        rec.step = sp.stale_from - 1;
        rec.loss = rec.loss_avg = frozen_loss;
      }
      rec.rank = r;  // mutate may depend on the rank
      if (sp.mutate) sp.mutate(rec);
      emit(r, T + 0.001 * r, rec);
    }
    if (sp.stale_from < 0 || step < sp.stale_from) frozen_loss = loss_avg;
    if (sp.fp16) {
      const double before = scaler.scale;
      scaler.update(overflow);
      if (scaler.scale > before) overflow_next = sp.overflow_after_growth;
    }
    last_done = step;

    // --- pauses after the step (as sim/trainer.cpp: eval, then checkpoint; checkpoint_save is
    //     written once the save is complete)
    if (sp.eval_at.count(step)) {
      for (int r = 0; r < sp.world; ++r) event(r, T + 0.002, "eval_start", step);
      seg(T, T + sp.pause_s, "eval", step);
      T += sp.pause_s;
      for (int r = 0; r < sp.world; ++r) {
        Record e;
        e.kind = RecordKind::eval;
        e.step = step;
        e.eval_loss = loss_avg + 0.1;
        emit(r, T - 0.01, e);
        event(r, T, "eval_end", step);
      }
    }
    if (sp.checkpoint_at.count(step)) {
      seg(T, T + sp.pause_s, "checkpoint", step);
      T += sp.pause_s;
      for (int r = 0; r < sp.world; ++r) event(r, T, "checkpoint_save", step);
      scale_at[step] = scaler;
      opt_at[step] = opt;
    }
    // --- restart: every rank stops, new processes resume from the checkpoint
    if (step == sp.restart_after && !resumed) {
      // As sim/trainer.cpp: stop_for_restart; the process is gone (no heartbeats); the new one's
      // watchdog beats (phase data) while it starts up, then it logs resume and checkpoint_load.
      for (int r = 0; r < sp.world; ++r) {
        // just after this rank's last step record (logged at T + 0.001 r), whatever the world size
        if (sp.restart_events) event(r, T + 0.001 * r + 0.0005, "stop_for_restart", step);
        segs[r].push_back({T, T + sp.restart_gap_s, "", step});
        segs[r].push_back({T + sp.restart_gap_s, T + sp.restart_gap_s + sp.startup_s, "data", step});
      }
      T += sp.restart_gap_s + sp.startup_s;
      resumed = true;
      step = sp.restart_from;
      if (scale_at.count(step)) scaler = scale_at[step];
      if (opt_at.count(step)) opt = opt_at[step];
      for (int r = 0; r < sp.world; ++r)
        if (sp.restart_events) {
          event(r, T, "resume", step, "from checkpoint step " + std::to_string(step));
          event(r, T + 0.01, "checkpoint_load", step);
        }
      T += 0.02;
      last_done = step;
      ++step;
      continue;
    }
    ++step;
  }
  if (sp.hang_at < 0 || sp.hang_at > sp.steps)
    for (int r = 0; r < sp.world; ++r) {
      event(r, T + 0.01, "run_end", last_done);
      alive_until[r] = T + 0.01;
    }

  // --- heartbeats: each rank's watchdog samples the phase it is in
  if (sp.heartbeats) {
    for (int r = 0; r < sp.world; ++r) {
      const double off = sp.hb_s * unif(sp.seed, 8, r);
      size_t si = 0;
      for (double t = off; t < alive_until[r]; t += sp.hb_s) {
        while (si + 1 < segs[r].size() && segs[r][si].t1 <= t) ++si;
        const Seg& g = segs[r][si];
        if (g.phase.empty() && t >= g.t0 && t < g.t1) continue;  // process dead during a restart
        Record h;
        h.kind = RecordKind::heartbeat;
        h.step = g.step;
        h.phase = g.phase.empty() ? "data" : g.phase;
        emit(r, t, h);
      }
    }
  }
  std::vector<std::vector<Record>> out(sp.world);
  for (int r = 0; r < sp.world; ++r) {
    std::stable_sort(items[r].begin(), items[r].end(),
                     [](const Item& a, const Item& b) { return a.t != b.t ? a.t < b.t : a.order < b.order; });
    for (auto& it : items[r]) {
      if (!sp.with_t) it.r.t = nan;
      out[r].push_back(std::move(it.r));
    }
  }
  return out;
}

enum class Order { by_time, round_robin, rank_first, reversed, chunked };

// Merges per-rank streams into one arrival order (per-rank order always preserved).
inline std::vector<Record> interleave(const std::vector<std::vector<Record>>& per_rank, Order o, uint64_t seed = 9) {
  std::vector<Record> out;
  std::vector<size_t> pos(per_rank.size(), 0);
  const int n = static_cast<int>(per_rank.size());
  auto left = [&](int r) { return pos[r] < per_rank[r].size(); };
  auto any_left = [&] {
    for (int r = 0; r < n; ++r)
      if (left(r)) return true;
    return false;
  };
  if (o == Order::rank_first) {
    for (int r = 0; r < n; ++r) out.insert(out.end(), per_rank[r].begin(), per_rank[r].end());
    return out;
  }
  uint64_t k = 0;
  while (any_left()) {
    if (o == Order::by_time) {
      int best = -1;
      for (int r = 0; r < n; ++r)
        if (left(r) && (best < 0 || per_rank[r][pos[r]].t < per_rank[best][pos[best]].t)) best = r;
      out.push_back(per_rank[best][pos[best]++]);
    } else if (o == Order::chunked) {
      const int r = static_cast<int>(mix64(seed + k) % n);
      const size_t len = 1 + mix64(seed * 31 + k) % 40;
      for (size_t i = 0; i < len && left(r); ++i) out.push_back(per_rank[r][pos[r]++]);
      ++k;
    } else {
      for (int i = 0; i < n; ++i) {
        const int r = o == Order::reversed ? n - 1 - i : i;
        if (left(r)) out.push_back(per_rank[r][pos[r]++]);
      }
    }
  }
  return out;
}

// Runs one detector over a stream (then finish at the last t + 1 s) and returns it.
inline std::unique_ptr<Detector> run_detector(const std::string& cause, const std::vector<Record>& recs,
                                              int world_size = 0, bool finish = true) {
  DetectorConfig cfg;
  cfg.world_size = world_size;
  auto d = make_detector(cause, cfg);
  double t_end = 0;
  for (const auto& r : recs) {
    d->observe(r);
    if (std::isfinite(r.t)) t_end = std::max(t_end, r.t);
  }
  if (finish) d->finish(t_end + 1);
  return d;
}

// The finding of one detector over a generated stream in the given arrival order.
inline std::optional<Finding> run_finding(const std::string& cause, const Spec& sp, Order o = Order::by_time,
                                          int world_size = 0) {
  return run_detector(cause, interleave(generate(sp), o), world_size)->finding();
}

inline bool same_finding(const Finding& a, const Finding& b) {
  const bool t_same = (std::isnan(a.detected_t) && std::isnan(b.detected_t)) || a.detected_t == b.detected_t;
  return a.cause == b.cause && a.rank == b.rank && a.onset_step == b.onset_step &&
         a.detected_step == b.detected_step && t_same && a.confidence == b.confidence && a.evidence == b.evidence;
}

// The finding over `rs` in time order (world size 2) is found, and is the same in every other arrival
// order, with the world size given and inferred.
inline void expect_same_finding_whatever_the_interleaving(const std::string& cause,
                                                          const std::vector<std::vector<Record>>& rs) {
  auto ref = run_detector(cause, interleave(rs, Order::by_time), 2)->finding();
  ASSERT_TRUE(ref);
  for (int world : {2, 0})
    for (auto o : {Order::round_robin, Order::rank_first, Order::reversed, Order::chunked}) {
      auto f = run_detector(cause, interleave(rs, o), world)->finding();
      ASSERT_TRUE(f);
      EXPECT_TRUE(same_finding(*ref, *f)) << world << " " << static_cast<int>(o);
    }
}

}  // namespace flatline::testing
