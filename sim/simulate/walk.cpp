// Walk (walk.h): one optimizer step on every rank, interpreting StepActions as sim/trainer.cpp does:
// zero_grads / skip_backward -> the rank's local_grad_norm 0 and the all-reduced gradient x (W-1)/W;
// block_s -> the rank arrives late at the all-reduce (past the collective timeout: a hang);
// freeze_logging; inject_inf -> overflow; max_loss_scale; batch_index; scheduler_frozen; slowdown;
// and ResumeActions at a restart.
#include "sim/simulate/walk.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/protocol.h"
#include "run/sampler.h"

namespace flatline::simdetail {
namespace {
constexpr double kEvalS = 2.0, kCheckpointS = 3.0, kRestartGapS = 20.0;  // simulated pauses

// FleetSampler's permutation over a run of positions, without a loop-carried dependency so that it
// vectorises; in 32 bits when the dataset fits them (2^k divides 2^32, so the ids are the same), built
// for AVX2 and for the baseline, picked when the library loads (GCC target_clones).
__attribute__((target_clones("avx2", "default"))) void permute32(uint32_t a, uint32_t b, uint32_t c, uint32_t mask,
                                                                int sh, uint32_t first, int64_t count, int64_t* out) {
  for (int64_t j = 0; j < count; ++j) {
    const uint32_t x = (a * (first + static_cast<uint32_t>(j)) + b) & mask;
    out[j] = static_cast<int64_t>((c * (x ^ (x >> sh))) & mask);
  }
}
}  // namespace

void FleetSampler::permute_run(int64_t first, int64_t count, int64_t* out) const {
  const uint64_t mask = static_cast<uint64_t>(n - 1);
  if (n <= (int64_t{1} << 32)) {
    permute32(static_cast<uint32_t>(a_), static_cast<uint32_t>(b_), static_cast<uint32_t>(c_),
              static_cast<uint32_t>(mask), shift, static_cast<uint32_t>(first), count, out);
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t x = (a_ * static_cast<uint64_t>(first + j) + b_) & mask;
    out[j] = static_cast<int64_t>((c_ * (x ^ (x >> shift))) & mask);
  }
}

Walk::Walk(const Scenario& s, const SimOptions& o, RecordSink& sink)
    : sc_(s), sink_(sink), plan_(s), sampler_(s.world_size, s.batch_size * s.grad_accum, s.seed),
      world_(s.world_size), seed_(s.seed), onsets_(plan_.truths()) {
  compute_ms_ = o.step_ms > 0 ? o.step_ms : kDefaultComputeMs;
  comm_ms_ = comm_ms(world_);
  hb_s_ = s.heartbeat_s > 0 ? s.heartbeat_s : 0.5;
  nparams_ = model_params(s.model);
  tr_.c = plan_.start();
  tr_.logged.assign(world_, LoggedStep{});
  cls_.assign(world_, -1);
  for (const auto& f : plan_.faults()) {
    const int r = f->spec().target_rank;
    if (r >= 0 && cls_[r] < 0) {
      cls_[r] = static_cast<int>(targeted_ranks_.size());
      targeted_ranks_.push_back(r);
    }
  }
  targeted_.resize(targeted_ranks_.size());
  next_hb_.resize(world_);
  for (int r = 0; r < world_; ++r) next_hb_[r] = hb_s_ * unif(key(seed_, 7, 0, r));  // watchdogs start apart
  compute_.resize(world_);
  loss_.resize(world_);
  replay_.resize(world_);
  ids_.resize(static_cast<size_t>(sampler_.per_rank));
  global_ids_.resize(static_cast<size_t>(sampler_.global));
  res_.truths = plan_.truths();
  block_.resize(kBlock);
}

// Every fault at every hook, once for the untargeted ranks (a fault acts alike on every rank it
// targets) and once per targeted rank. No fault reads what another set, so the hooks can run first.
void Walk::actions(int64_t s) {
  int rep = 0;
  while (rep < world_ && cls_[rep] >= 0) ++rep;
  generic_ = plan_.actions(s, rep < world_ ? rep : 0, world_);
  for (size_t i = 0; i < targeted_ranks_.size(); ++i) targeted_[i] = plan_.actions(s, targeted_ranks_[i], world_);
}

SimResult Walk::run() {
  for (int r = 0; r < world_; ++r) event(r, "run_start", 0, 0, fmt::format("world_size {}, scenario {} (simulated)", world_, sc_.name));
  for (int64_t s = 1; s <= sc_.steps; ++s) {
    actions(s);
    // Every rank blocked fetching its batch past the launcher's progress watchdog: stopped by it.
    bool all_stalled = world_ > 0;
    for (int r = 0; r < world_ && all_stalled; ++r) all_stalled = act(r).data_block_s > 0;
    if (all_stalled) {
      double least = std::numeric_limits<double>::infinity();
      for (int r = 0; r < world_; ++r) least = std::min(least, act(r).data_block_s);
      const double step_s = (kDataMs + compute_ms_ + comm_ms_) / 1000;
      const double bound = progress_bound_s(s > 1, step_s, hb_s_, sc_.collective_timeout_s);
      if (least > bound) {
        stall(s, bound);
        flush();
        sink_.end(t_);
        res_.t_end = t_;
        for (size_t i = 0; i < onsets_.size(); ++i) res_.onset_t.push_back(onsets_.onset_t(i));
        return res_;
      }
    }
    int hung = -1;
    for (int r = 0; r < world_ && hung < 0; ++r)
      if (act(r).block_s + act(r).data_block_s >= sc_.collective_timeout_s) hung = r;
    if (hung >= 0) {
      hang(s, hung);
      flush();
      sink_.end(t_);
      res_.t_end = t_;
      for (size_t i = 0; i < onsets_.size(); ++i) res_.onset_t.push_back(onsets_.onset_t(i));
      return res_;
    }
    step(s);
    if (sc_.eval_every > 0 && s % sc_.eval_every == 0) {
      for (int r = 0; r < world_; ++r) event(r, "eval_start", s, t_);
      pause("eval", kEvalS, s);
      for (int r = 0; r < world_; ++r) {
        Record& e = slot(RecordKind::eval);
        e.rank = r;
        e.step = s;
        e.t = t_;
        e.eval_loss = loss_at(tr_.progress) * 1.03;
        emitted(e);
        event(r, "eval_end", s, t_);
      }
    }
    if (sc_.checkpoint_every > 0 && s % sc_.checkpoint_every == 0) {
      pause("checkpoint", kCheckpointS, s);
      saved_ = tr_;
      saved_step_ = s;
      for (int r = 0; r < world_; ++r) event(r, "checkpoint_save", s, t_, fmt::format("checkpoints/step-{:08d}", s));
    }
    if (plan_.stops_for_restart(s, resumed_)) {  // every rank stops; new processes resume from the checkpoint
      for (int r = 0; r < world_; ++r) event(r, "stop_for_restart", s, t_);
      resumed_ = true;
      t_ += kRestartGapS;
      for (int r = 0; r < world_; ++r) next_hb_[r] = t_ + hb_s_ * unif(key(seed_, 8, s, r));
      if (saved_step_ < 0) {
        for (int r = 0; r < world_; ++r) event(r, "error", s, t_, "resume asked but no complete checkpoint");
        res_.failed = true;
        res_.error = "resume asked but no complete checkpoint";
        break;
      }
      tr_ = saved_;
      if (!plan_.resume(tr_.c).restore_sampler) tr_.sampler_index = 0;  // SamplerState{}: epoch 0, position 0
      for (int r = 0; r < world_; ++r) {
        event(r, "resume", saved_step_, t_, fmt::format("from checkpoint step {}", saved_step_));
        event(r, "checkpoint_load", saved_step_, t_, fmt::format("checkpoints/step-{:08d}", saved_step_));
      }
      s = saved_step_;
    }
  }
  if (!res_.failed)
    for (int r = 0; r < world_; ++r) event(r, "run_end", res_.last_step, t_, "param_mismatches 0");
  res_.t_end = t_;
  flush();
  sink_.end(t_);
  for (size_t i = 0; i < onsets_.size(); ++i) res_.onset_t.push_back(onsets_.onset_t(i));
  return res_;
}

void Walk::step(int64_t s) {
  // this step's per-rank draws, one stream each (model.h)
  const uint64_t k_compute = step_key(seed_, 1, s), k_loss = step_key(seed_, 3, s), k_t = step_key(seed_, 5, s),
                 k_local = step_key(seed_, 6, s);
  const StepActions& g = generic_;
  // ---- data: the sampler's next global batch, or the batch a fault asks for
  const int64_t index = RunPlan::replaced_batch(g).value_or(tr_.sampler_index);
  if (!RunPlan::replaced_batch(g)) ++tr_.sampler_index;
  // ---- compute: per-rank forward + backward time; who contributes zeros; who emits inf
  int zeroed = 0, replayed = 0;
  bool inject_inf = false;
  cmax_ = 0;
  for (int r = 0; r < world_; ++r) {
    const StepActions& a = act(r);
    double c = compute_ms_ * (1 + 0.02 * gauss(draw(k_compute, r))) * (1 + a.slowdown);
    if (a.skip_backward) c *= 0.35;  // forward only
    if (a.block_s > 0) c += a.block_s * 1000;  // shorter than the collective timeout: a late arrival
    if (a.data_block_s > 0) c += a.data_block_s * 1000;  // likewise, fetching the batch
    compute_[r] = c;
    cmax_ = std::max(cmax_, c);
    if (RunPlan::contributes_zeros(a)) ++zeroed;
    inject_inf = inject_inf || a.inject_inf;
    replay_[r] = RunPlan::replaced_batch(a).value_or(index) <= tr_.max_index;
    replayed += replay_[r];
  }
  tr_.max_index = std::max(tr_.max_index, index);
  const double contrib = static_cast<double>(world_ - zeroed) / world_;
  // ---- forward loss (before the update) and all-reduce
  const double L = loss_at(tr_.progress), shared = 0.005 * gauss(key(seed_, 2, s, -1));
  double loss_sum = 0;
  for (int r = 0; r < world_; ++r) {
    loss_[r] = L * (1 + shared + 0.03 * gauss(draw(k_loss, r))) * (replay_[r] ? 0.97 : 1.0);  // memorised
    loss_sum += loss_[r];
  }
  const double loss_avg = loss_sum / world_;
  // ---- optimizer: unscale, overflow check, clip, update (GradScaler order)
  const double gn = grad_norm_at(tr_.progress) * (1 + 0.05 * gauss(key(seed_, 4, s, -1)));
  const double scale_used = tr_.c.scaler.scale;
  double zero_frac = tr_.c.scaler.enabled ? underflow_fraction(scale_used, gn) : 0.0;
  if ((1 - zero_frac) * nparams_ < 0.5) zero_frac = 1;  // not one element expected to survive: none does
  const bool overflow = inject_inf || (tr_.c.scaler.enabled && scale_used * gn * kMaxElemOverNorm > kFp16Max);
  const double grad_norm = overflow ? std::numeric_limits<double>::infinity() : gn * contrib * (1 - zero_frac);
  // The scaler is shared by every rank; a clamp (scale_clamped_low) acts alike on all of them.
  const UpdateDecision upd = plan_.update(tr_.c, g, overflow);
  const bool skipped = upd.skip;
  const double lr = upd.lr;
  double update_norm = 0;
  if (!skipped) {
    const double fresh = 1.0 - static_cast<double>(replayed) / world_;
    tr_.progress += (plan_.schedule().peak > 0 ? lr / plan_.schedule().peak : 0) * contrib * (1 - zero_frac) * fresh;
    update_norm = lr * std::sqrt(nparams_) * 0.2 * (1 - zero_frac);
  }
  tr_.c.samples_seen += sampler_.per_rank;
  const double param_norm = 0.02 * std::sqrt(nparams_) * (1 + 0.5 * (1 - std::exp(-tr_.progress / 5000)));
  // ---- timing: the all-reduce starts when the slowest rank arrives
  step_t0_ = t_;
  const double step_ms = kDataMs + cmax_ + comm_ms_ + kOptimizerMs;
  const double t_end = t_ + step_ms / 1000;
  // ---- logging: heartbeats inside the step, then the step record, rank by rank
  const int64_t epoch = sampler_.epoch(index);
  const bool logged = plan_.logs(s);
  if (logged) sampler_.global_ids(index, global_ids_.data());  // every rank's slice at once
  for (int r = 0; r < world_; ++r) {
    const StepActions& a = act(r);
    beats_until(r, t_end, s);
    RunPlan::log(tr_.logged[r], a, s, loss_[r]);
    if (!logged) continue;
    const bool zero = RunPlan::contributes_zeros(a);
    const int64_t* ids = global_ids_.data() + static_cast<size_t>(r) * ids_.size();
    if (const auto own = RunPlan::replaced_batch(a); own && *own != index) {
      sampler_.ids(*own, r, ids_.data());
      ids = ids_.data();
    }
    Record& rec = slot(RecordKind::step);
    rec.opt_step = tr_.c.opt_step;
    rec.lr = lr;
    rec.grad_norm = grad_norm;
    rec.grad_zero_frac = zero_frac;
    rec.param_norm = param_norm;
    rec.update_norm = update_norm;
    rec.loss_scale = scale_used;
    rec.overflow = overflow;
    rec.skipped = skipped;
    rec.epoch = epoch;
    rec.samples_seen = tr_.c.samples_seen;
    rec.step_ms = step_ms;
    rec.param_mismatches = 0;  // modelled ranks apply one update
    rec.rank = r;
    rec.t = t_end + 1e-4 * unif(draw(k_t, r));  // ranks write a fraction of a ms apart
    rec.step = tr_.logged[r].step;
    rec.loss = tr_.logged[r].loss;
    rec.loss_avg = RunPlan::logged_loss_avg(tr_.logged[r], a, loss_avg);
    // a rank's own gradient is fp16 before the all-reduce: it underflows as the global one does
    rec.local_grad_norm = zero ? 0.0
                          : a.inject_inf ? std::numeric_limits<double>::infinity()
                                         : gn * kLocalOverGlobal * (1 + 0.05 * gauss(draw(k_local, r))) * (1 - zero_frac);
    rec.batch_hash = batch_hash(ids, ids_.size());
    rec.comm_ms = cmax_ - compute_[r] + comm_ms_;
    emitted(rec);
    ++res_.step_records;
  }
  t_ = t_end + 1e-4;
  res_.last_step = s;
}

// A rank blocks past the collective timeout: the others wait in the all-reduce with heartbeats going
// on until it times out (an `error` event each); the hung rank ends when its block does (its peers are
// gone) or when the launcher kills it, kKillGraceS after the first failure (core/protocol.h), as the
// harness does.
void Walk::hang(int64_t s, int hung) {
  const uint64_t k_compute = step_key(seed_, 1, s);
  step_t0_ = t_;
  cmax_ = 0;
  for (int r = 0; r < world_; ++r) {
    compute_[r] = compute_ms_ * (1 + 0.02 * gauss(draw(k_compute, r)));
    cmax_ = std::max(cmax_, compute_[r]);
  }
  double first_err = std::numeric_limits<double>::infinity();
  for (int r = 0; r < world_; ++r)
    if (r != hung) first_err = std::min(first_err, t_ + (kDataMs + compute_[r]) / 1000 + sc_.collective_timeout_s);
  const double t_kill = std::min(t_ + (kDataMs + compute_[hung]) / 1000 + act(hung).block_s + act(hung).data_block_s,
                                 first_err + kKillGraceS);
  compute_[hung] = cmax_ = std::numeric_limits<double>::infinity();  // never arrives; the others wait
  std::vector<char> failed(world_, 0);
  for (double tau = t_ + hb_s_; tau < t_kill + hb_s_; tau += hb_s_) {  // time slices: ranks interleave
    for (int r = 0; r < world_; ++r) {
      if (failed[r]) continue;
      const double t_err = r == hung ? t_kill : t_ + (kDataMs + compute_[r]) / 1000 + sc_.collective_timeout_s;
      beats_until(r, std::min(tau, t_err), s);
      if (t_err <= tau) {
        failed[r] = 1;
        if (r != hung)
          event(r, "error", s - 1, t_err,
                fmt::format("Timed out waiting {:.0f}ms for recv operation to complete (gloo allreduce, step {})",
                            sc_.collective_timeout_s * 1000, s));
      }
    }
  }
  t_ = t_kill;
  res_.failed = true;
  res_.error = fmt::format("rank {} hung before the all-reduce of step {}; the others timed out", hung, s);
}

// Every rank blocked fetching the batch of step s (a stalled loader): their heartbeats go on in phase
// "data", no collective is reached, so nothing times out; the launcher's progress watchdog stops every
// rank `bound` after the last step record (core/protocol.h progress_bound_s), and appends each one's
// `stopped` event, as the harness does.
void Walk::stall(int64_t s, double bound) {
  const double t_kill = t_ + bound;
  for (int r = 0; r < world_; ++r)
    while (next_hb_[r] < t_kill) {
      heartbeat(r, next_hb_[r], s, "data");
      next_hb_[r] += hb_s_;
    }
  t_ = t_kill;
  const std::string why = fmt::format("no step from any rank for {:.1f} s while records still arrive: every rank "
                                      "stopped by the launcher",
                                      bound);
  for (int r = 0; r < world_; ++r) event(r, "stopped", s - 1, t_, why);
  res_.failed = true;
  res_.error = fmt::format("every rank blocked fetching the batch of step {}; {}", s, why);
}

void Walk::pause(const char* phase, double seconds, int64_t s) {
  const double until = t_ + seconds;
  for (int r = 0; r < world_; ++r)
    while (next_hb_[r] < until) {
      heartbeat(r, next_hb_[r], s, phase);
      next_hb_[r] += hb_s_;
    }
  t_ = until;
}

void Walk::beats_until(int r, double until, int64_t s) {
  while (next_hb_[r] < until) {
    heartbeat(r, next_hb_[r], s, phase_at(r, next_hb_[r]));
    next_hb_[r] += hb_s_;
  }
}

void Walk::heartbeat(int r, double t, int64_t s, const char* phase) {
  Record& h = slot(RecordKind::heartbeat);
  h.rank = r;
  h.t = t;
  h.step = s;
  h.phase = phase;
  emitted(h);
  ++res_.heartbeats;
}

void Walk::event(int r, const char* name, int64_t s, double t, const std::string& detail) {
  Record& e = slot(RecordKind::event);
  e.rank = r;
  e.t = t;
  e.step = s;
  e.name = name;
  e.detail = detail;
  emitted(e);
}

Record& Walk::slot(RecordKind k) {
  if (n_ == kBlock) flush();
  Record& r = block_[n_];
  if (r.kind == k) return r;  // the caller sets every field of its kind
  if (r.kind == RecordKind::step || r.kind == RecordKind::eval) r = Record{};  // numbers of another kind
  r.phase.clear();
  r.name.clear();
  r.detail.clear();
  r.kind = k;
  return r;
}

void Walk::emitted(const Record& r) {
  ++n_;
  onsets_.observe(r);
  ++res_.records;
}

void Walk::flush() {
  if (n_) sink_.write_block(block_.data(), n_);
  n_ = 0;
}

// trainer.cpp's watchdog phases: data, compute (forward + backward, or a block before the
// all-reduce), collective (waiting for the slowest rank, then the transfer), optimizer.
const char* Walk::phase_at(int r, double t) const {
  const double d = (t - step_t0_) * 1000;
  if (d < kDataMs) return "data";
  if (d < kDataMs + compute_[r]) return "compute";
  if (d < kDataMs + cmax_ + comm_ms_) return "collective";
  return "optimizer";
}

}  // namespace flatline::simdetail
