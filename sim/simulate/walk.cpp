// Walk (walk.h): one optimizer step on every rank, interpreting StepActions as sim/trainer.cpp does:
// zero_grads / skip_backward -> the rank's local_grad_norm 0 and the all-reduced gradient x (W-1)/W;
// block_s -> the rank arrives late at the all-reduce (past the collective timeout: a hang);
// freeze_logging; inject_inf -> overflow; max_loss_scale; batch_index; scheduler_frozen; slowdown;
// and ResumeActions at a restart.
#include "sim/simulate/walk.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/protocol.h"
#include "run/sampler.h"
#include "sim/simulate/lanes.h"

namespace flatline::simdetail {
namespace {
constexpr double kEvalS = 2.0, kCheckpointS = 3.0, kRestartGapS = 20.0;  // simulated pauses

// FleetSampler's permutation over positions first, first + stride, ..., without a loop-carried
// dependency so that it vectorises; in 32 bits when the dataset fits them (2^k divides 2^32, so the ids
// are the same; a run is shorter than 2^32), built for AVX2 and for the baseline, picked when the library
// loads (GCC target_clones).
__attribute__((target_clones("avx2", "default"))) void permute32(uint32_t a, uint32_t b, uint32_t c, uint32_t mask,
                                                                int sh, uint32_t first, uint32_t stride,
                                                                int64_t count, int64_t* out) {
  const uint32_t a1 = a * stride, b1 = a * first + b;  // a (first + stride j) + b = a1 j + b1 (mod 2^32)
  const uint32_t n = static_cast<uint32_t>(count);
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t x = (a1 * j + b1) & mask;
    out[j] = static_cast<int64_t>((c * (x ^ (x >> sh))) & mask);
  }
}
// Four columns of n rows set to one value each (d: none when null), in one loop: the restrict parameters
// let it vectorise with no overlap check (GCC checks at most ~10 pairs of pointers at run time).
template <class T>
void fill_shared(size_t n, T* __restrict a, T va, T* __restrict b, T vb, T* __restrict c, T vc, T* __restrict d, T vd) {
  if (d)
    for (size_t r = 0; r < n; ++r) a[r] = va, b[r] = vb, c[r] = vc, d[r] = vd;
  else
    for (size_t r = 0; r < n; ++r) a[r] = va, b[r] = vb, c[r] = vc;
}
// A logged step's per-rank step, loss, loss_avg (the logger's loss when frozen, else the mean) and comm_ms
// (the wait for the slowest rank plus the transfer), in one loop that vectorises. Not split into memcpy
// calls (GCC's loop-distribution patterns): for large n glibc copies with `rep movsb`, which callgrind
// counts byte by byte, so the instruction counts of bench/ would not compare across world sizes.
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void fill_logged(
    size_t n, const int64_t* __restrict logged_step, const double* __restrict logged_loss,
    const double* __restrict compute, bool frozen, double loss_avg, double cmax, double wire, int64_t* __restrict step,
    double* __restrict loss, double* __restrict avg, double* __restrict comm) {
  if (frozen)
    for (size_t r = 0; r < n; ++r)
      step[r] = logged_step[r], loss[r] = logged_loss[r], avg[r] = logged_loss[r], comm[r] = cmax - compute[r] + wire;
  else
    for (size_t r = 0; r < n; ++r)
      step[r] = logged_step[r], loss[r] = logged_loss[r], avg[r] = loss_avg, comm[r] = cmax - compute[r] + wire;
}
}  // namespace

void FleetSampler::permute_run(int64_t first, int64_t count, int64_t* out, int64_t stride) const {
  const uint64_t mask = static_cast<uint64_t>(n - 1);
  if (n <= (int64_t{1} << 32)) {
    permute32(static_cast<uint32_t>(a_), static_cast<uint32_t>(b_), static_cast<uint32_t>(c_),
              static_cast<uint32_t>(mask), shift, static_cast<uint32_t>(first), static_cast<uint32_t>(stride), count,
              out);
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t x = (a_ * static_cast<uint64_t>(first + j * stride) + b_) & mask;
    out[j] = static_cast<int64_t>((c_ * (x ^ (x >> shift))) & mask);
  }
}

Walk::Walk(const Scenario& s, const SimOptions& o, RecordSink& sink, Handoff* handoff)
    : sc_(s), sink_(sink), plan_(s), sampler_(s.world_size, s.batch_size * s.grad_accum, s.seed),
      world_(s.world_size), seed_(s.seed), handoff_(handoff), hash_ranks_(sink.batch_hash_ranks()),
      onsets_(plan_.truths()) {
  compute_ms_ = o.step_ms > 0 ? o.step_ms : kDefaultComputeMs;
  comm_ms_ = comm_ms(world_);
  hb_s_ = s.heartbeat_s > 0 ? s.heartbeat_s : 0.5;
  nparams_ = model_params(s.model);
  tr_.c = plan_.start();
  tr_.logged_step.assign(world_, 0);
  tr_.logged_loss.assign(world_, 0.0);
  cls_.assign(world_, -1);
  for (const auto& f : plan_.faults()) {
    const int r = f->spec().target_rank;
    if (r >= 0 && cls_[r] < 0) {
      cls_[r] = static_cast<int>(targeted_ranks_.size());
      targeted_ranks_.push_back(r);
    }
  }
  targeted_.resize(targeted_ranks_.size());
  while (first_untargeted_ < world_ && cls_[first_untargeted_] >= 0) ++first_untargeted_;
  next_hb_.resize(world_);
  due_.resize(static_cast<size_t>(world_) + 8);  // due_ranks stores eight at a time
  for (int r = 0; r < world_; ++r) next_hb_[r] = hb_s_ * unif(key(seed_, 7, 0, r));  // watchdogs start apart
  compute_.resize(world_);
  loss_.resize(world_);
  draws_.resize(world_);
  replay_.resize(world_);
  ids_.resize(static_cast<size_t>(sampler_.per_rank));
  res_.truths = plan_.truths();
  if (!o.output_ranks.empty()) {
    all_out_ = false;
    out_.assign(world_, 0);
    for (const int r : o.output_ranks)
      if (r >= 0 && r < world_) out_[r] = 1;
    for (int r = 0; r < world_; ++r)
      if (out_[r]) out_list_.push_back(r);
  }
  for (const auto& t : res_.truths) {
    const int r = t.rank >= 0 ? t.rank : 0;  // OnsetClock reads the target rank's records (rank 0: all)
    if (std::find(onset_ranks_.begin(), onset_ranks_.end(), r) == onset_ranks_.end()) onset_ranks_.push_back(r);
  }
}

// A block of world_ rows whose rank and param_mismatches columns are set (the same in every step; a
// block handed off comes back with another's, which were set alike).
void Walk::ready_rows() {
  const size_t W = static_cast<size_t>(world_);
  if (rows_.rows() == W) return;
  rows_.resize(W);
  for (size_t r = 0; r < W; ++r) rows_.rank[r] = static_cast<int32_t>(r);
  for (size_t r = 0; r < W; ++r) rows_.param_mismatches[r] = 0;  // modelled ranks apply one update
}

// Every fault at every hook, once for the untargeted ranks (a fault acts alike on every rank it
// targets) and once per targeted rank. No fault reads what another set, so the hooks can run first.
void Walk::actions(int64_t s) {
  generic_ = plan_.actions(s, first_untargeted_ < world_ ? first_untargeted_ : 0, world_);
  for (size_t i = 0; i < targeted_ranks_.size(); ++i) targeted_[i] = plan_.actions(s, targeted_ranks_[i], world_);
}

SimResult Walk::run() {
  const std::string started = fmt::format("world_size {}, scenario {} (simulated)", world_, sc_.name);
  for (int r = 0; r < world_; ++r) event(r, event::run_start, 0, 0, started);
  for (int64_t s = 1; s <= sc_.steps; ++s) {
    actions(s);
    // Every rank blocked fetching its batch past the launcher's progress watchdog: stopped by it. (Each
    // question asked of the untargeted ranks' actions once and of each targeted rank's.)
    const bool untargeted = world_ > static_cast<int>(targeted_ranks_.size());
    bool all_stalled = world_ > 0 && (!untargeted || generic_.data_block_s > 0);
    for (const int r : targeted_ranks_) all_stalled = all_stalled && act(r).data_block_s > 0;
    if (all_stalled) {
      double least = untargeted ? generic_.data_block_s : std::numeric_limits<double>::infinity();
      for (const int r : targeted_ranks_) least = std::min(least, act(r).data_block_s);
      const double step_s = (kDataMs + compute_ms_ + comm_ms_) / 1000;
      const double bound = progress_bound_s(s > 1, step_s, hb_s_, sc_.collective_timeout_s);
      if (least > bound) {
        stall(s, bound);
        finish_run();
        return res_;
      }
    }
    auto hangs = [&](int r) { return act(r).block_s + act(r).data_block_s >= sc_.collective_timeout_s; };
    int hung = -1;  // the lowest rank that hangs
    if (untargeted && hangs(first_untargeted_)) hung = first_untargeted_;
    for (const int r : targeted_ranks_)
      if (hangs(r) && (hung < 0 || r < hung)) hung = r;
    if (hung >= 0) {
      hang(s, hung);
      finish_run();
      return res_;
    }
    step(s);
    if (sc_.eval_every > 0 && s % sc_.eval_every == 0) {
      for (int r = 0; r < world_; ++r) event(r, event::eval_start, s, t_);
      pause("eval", kEvalS, s);
      for (int r = 0; r < world_; ++r) {
        if (!writes(r)) continue;
        rec_ = Record{};
        rec_.kind = RecordKind::eval;
        rec_.rank = r;
        rec_.step = s;
        rec_.t = t_;
        rec_.eval_loss = loss_at(tr_.progress) * 1.03;
        write(rec_);
        event(r, event::eval_end, s, t_);
      }
    }
    if (sc_.checkpoint_every > 0 && s % sc_.checkpoint_every == 0) {
      pause("checkpoint", kCheckpointS, s);
      saved_ = tr_;
      saved_step_ = s;
      const std::string path = fmt::format("checkpoints/step-{:08d}", s);
      for (int r = 0; r < world_; ++r) event(r, event::checkpoint_save, s, t_, path);
    }
    if (plan_.stops_for_restart(s, resumed_)) {  // every rank stops; new processes resume from the checkpoint
      for (int r = 0; r < world_; ++r) event(r, event::stop_for_restart, s, t_);
      resumed_ = true;
      t_ += kRestartGapS;
      for (int r = 0; r < world_; ++r) next_hb_[r] = t_ + hb_s_ * unif(key(seed_, 8, s, r));
      if (saved_step_ < 0) {
        for (int r = 0; r < world_; ++r) event(r, event::error, s, t_, "resume asked but no complete checkpoint");
        res_.failed = true;
        res_.error = "resume asked but no complete checkpoint";
        break;
      }
      tr_ = saved_;
      if (!plan_.resume(tr_.c).restore_sampler) tr_.sampler_index = 0;  // SamplerState{}: epoch 0, position 0
      const std::string from = fmt::format("from checkpoint step {}", saved_step_),
                        path = fmt::format("checkpoints/step-{:08d}", saved_step_);
      for (int r = 0; r < world_; ++r) {
        event(r, event::resume, saved_step_, t_, from);
        event(r, event::checkpoint_load, saved_step_, t_, path);
      }
      s = saved_step_;
    }
  }
  if (!res_.failed)
    for (int r = 0; r < world_; ++r) event(r, event::run_end, res_.last_step, t_, "param_mismatches 0");
  res_.t_end = t_;
  finish_run();
  return res_;
}

void Walk::finish_run() {
  flush_beats();
  res_.t_end = t_;
  sink_.end(t_);
  for (size_t i = 0; i < onsets_.size(); ++i) res_.onset_t.push_back(onsets_.onset_t(i));
}

double Walk::compute_of(const StepActions& a, double g) const {
  double c = compute_ms_ * (1 + 0.02 * g) * (1 + a.slowdown);
  if (a.skip_backward) c *= 0.35;  // forward only
  if (a.block_s > 0) c += a.block_s * 1000;  // shorter than the collective timeout: a late arrival
  if (a.data_block_s > 0) c += a.data_block_s * 1000;  // likewise, fetching the batch
  return c;
}

// trainer.cpp's watchdog phases: data, compute (forward + backward, or a block before the
// all-reduce), collective (waiting for the slowest rank, then the transfer), optimizer.
uint8_t Walk::phase_at(int r, double t) const {
  const double d = (t - step_t0_) * 1000;
  if (d < kDataMs) return kPhaseData;
  if (d < kDataMs + compute_[r]) return kPhaseCompute;
  if (d < kDataMs + cmax_ + comm_ms_) return kPhaseCollective;
  return kPhaseOptimizer;
}

// Rank r's heartbeats before `until`: one run per phase (the times are the watchdog's, t + hb_s_ each).
void Walk::beats_until(StepBlock& b, uint32_t row, int r, double until, int64_t s) {
  double t = next_hb_[r];
  if (!(t < until)) return;
  // the first beat may continue the block's last run (a run of this rank, phase and step before this row)
  uint8_t ph = phase_at(r, t);
  StepBlock::Beats* last = b.beats.empty() ? nullptr : &b.beats.back();
  if (last && last->rank == r && last->phase == ph && last->step == s && last->row == row && last->dt == hb_s_ &&
      last->t_last + hb_s_ == t) {
    ++last->n;
    last->t_last = t;
  } else {
    b.beats.push_back({r, ph, 1, row, s, t, hb_s_, t});
    last = &b.beats.back();
  }
  // the next ones continue it while the phase holds (their times are t_last + hb_s_ by construction)
  for (t += hb_s_; t < until; t += hb_s_) {
    ph = phase_at(r, t);
    if (last->phase == ph) {
      ++last->n;
      last->t_last = t;
    } else {
      b.beats.push_back({r, ph, 1, row, s, t, hb_s_, t});
      last = &b.beats.back();
    }
  }
  next_hb_[r] = t;
}

void Walk::step(int64_t s) {
  // this step's per-rank draws, one stream each (model.h), every rank at once (lanes.h)
  const uint64_t k_compute = step_key(seed_, 1, s), k_loss = step_key(seed_, 3, s);
  const StepActions& g = generic_;
  const size_t W = static_cast<size_t>(world_);
  // ---- data: the sampler's next global batch, or the batch a fault asks for
  const int64_t index = RunPlan::replaced_batch(g).value_or(tr_.sampler_index);
  if (!RunPlan::replaced_batch(g)) ++tr_.sampler_index;
  // ---- compute: per-rank forward + backward time; who contributes zeros; who emits inf. Every rank as
  // the untargeted ones first, then the targeted ranks again with their own actions.
  const char replay_g = RunPlan::replaced_batch(g).value_or(index) <= tr_.max_index;
  if (g.skip_backward || g.block_s > 0 || g.data_block_s > 0) {
    gauss_draws(k_compute, 0, W, draws_.data());
    for (size_t r = 0; r < W; ++r) compute_[r] = compute_of(g, draws_[r]);
  } else {  // compute_of without its adjustments: compute_ms x (1 + 0.02 g) x (1 + slowdown), as drawn
    gauss_draws(k_compute, 0, W, Noise{compute_ms_, 1, 0.02, 1 + g.slowdown}, compute_.data());
  }
  std::fill(replay_.begin(), replay_.end(), replay_g);
  int zeroed = RunPlan::contributes_zeros(g) ? world_ - static_cast<int>(targeted_ranks_.size()) : 0;
  int replayed = replay_g ? world_ - static_cast<int>(targeted_ranks_.size()) : 0;
  bool inject_inf = g.inject_inf && world_ > static_cast<int>(targeted_ranks_.size());
  for (const int r : targeted_ranks_) {
    const StepActions& a = act(r);
    compute_[r] = compute_of(a, gauss(draw(k_compute, r)));  // the draw gauss_draws made (lanes.h)
    zeroed += RunPlan::contributes_zeros(a);
    inject_inf = inject_inf || a.inject_inf;
    replay_[r] = RunPlan::replaced_batch(a).value_or(index) <= tr_.max_index;
    replayed += replay_[r];
  }
  cmax_ = lanes_max(0.0, compute_.data(), W);  // std::max(std::max(0, c[0]), c[1])... (exact)
  tr_.max_index = std::max(tr_.max_index, index);
  const double contrib = static_cast<double>(world_ - zeroed) / world_;
  // ---- forward loss (before the update) and all-reduce
  const double L = loss_at(tr_.progress), shared = 0.005 * gauss(key(seed_, 2, s, -1));
  // L x (1 + shared + 3% noise), x 0.97 on a replayed batch (memorised): as the untargeted ranks train,
  // then again for a targeted rank that trains otherwise
  const double one_shared = 1 + shared;
  gauss_draws(k_loss, 0, W, Noise{L, one_shared, 0.03, replay_g ? 0.97 : 1.0}, loss_.data());
  for (const int r : targeted_ranks_)
    if (replay_[r] != replay_g) loss_[r] = Noise{L, one_shared, 0.03, replay_[r] ? 0.97 : 1.0}(gauss(draw(k_loss, r)));
  double loss_sum = 0;
  for (size_t r = 0; r < W; ++r) loss_sum += loss_[r];  // in rank order, as the all-reduce's reference
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
  // ---- logging: each rank's heartbeats inside the step before its step record
  const bool logged = plan_.logs(s);
  if (logged) flush_beats(), ready_rows();  // what came before this step (a pause's heartbeats) goes first
  StepBlock& b = logged ? rows_ : beats_;
  if (all_out_) {
    const size_t nd = due_ranks(next_hb_.data(), W, t_end, due_.data());  // the ranks with a beat before t_end
    for (size_t k = 0; k < nd; ++k) {
      const uint32_t r = due_[k];
      beats_until(b, logged ? r : 0, static_cast<int>(r), t_end, s);
    }
  } else {
    for (size_t k = 0; k < out_list_.size(); ++k)
      if (next_hb_[out_list_[k]] < t_end) beats_until(b, logged ? static_cast<uint32_t>(k) : 0, out_list_[k], t_end, s);
  }
  // RunPlan::log: the untargeted ranks all at once, then the targeted ones from what they showed before
  logged_before_.clear();
  for (const int r : targeted_ranks_) logged_before_.push_back({tr_.logged_step[r], tr_.logged_loss[r]});
  if (!g.freeze_logging)
    for (size_t r = 0; r < W; ++r) {
      tr_.logged_step[r] = s;
      tr_.logged_loss[r] = loss_[r];
    }
  for (size_t i = 0; i < targeted_ranks_.size(); ++i) {
    const int r = targeted_ranks_[i];
    LoggedStep& l = logged_before_[i];
    RunPlan::log(l, act(r), s, loss_[r]);
    tr_.logged_step[r] = l.step;
    tr_.logged_loss[r] = l.loss;
  }
  int64_t top = res_.max_logged_step;
  for (size_t r = 0; r < W; ++r) top = tr_.logged_step[r] > top ? tr_.logged_step[r] : top;
  if (logged) res_.max_logged_step = top;
  if (logged) {
    const uint64_t flags = StepBlock::kAllFields | (overflow ? StepBlock::kOverflowValue : 0) |
                           (skipped ? StepBlock::kSkippedValue : 0);  // every field, overflow and skipped as logged
    const StepValues v{s, index, loss_avg, t_end, flags, gn, zero_frac, lr, grad_norm, param_norm, update_norm,
                       scale_used, step_ms};
    if (all_out_) log_all(v);
    else log_some(v);
  } else {
    flush_beats();
  }
  t_ = t_end + 1e-4;
  res_.last_step = s;
}

// The step's records of the output ranks alone (SimOptions::output_ranks), one at a time.
void Walk::log_some(const StepValues& v) {
  fill_some(v.s, v.index, v.loss_avg, v.t_end, v.flags, v.gn, v.zero_frac);
  StepBlock& c = rows_;
  const size_t K = c.rows();
  for (size_t k = 0; k < K; ++k) {
    c.opt_step[k] = tr_.c.opt_step, c.epoch[k] = sampler_.epoch(v.index), c.samples_seen[k] = tr_.c.samples_seen;
    c.lr[k] = v.lr, c.grad_norm[k] = v.grad_norm, c.grad_zero_frac[k] = v.zero_frac, c.param_norm[k] = v.param_norm;
    c.update_norm[k] = v.update_norm, c.loss_scale[k] = v.scale_used, c.step_ms[k] = v.step_ms;
  }
  c.seal();
  hand_off(c);
}

// The step's records of every rank: one loop per column, the block in lockstep unless a logger froze.
void Walk::log_all(const StepValues& v) {
  const StepActions& g = generic_;
  const size_t W = static_cast<size_t>(world_);
  StepBlock& c = rows_;
  // what every rank logs alike: plain stores, four columns a loop
  // every rank's batch hash, or only those of the ranks the sink reads (RecordSink::batch_hash_ranks)
  const uint64_t rank_flags = hash_ranks_ ? v.flags & ~StepBlock::kBatchHash : v.flags;
  fill_shared<int64_t>(W, c.opt_step.data(), tr_.c.opt_step, c.epoch.data(), sampler_.epoch(v.index), c.samples_seen.data(),
              tr_.c.samples_seen, reinterpret_cast<int64_t*>(c.flags.data()), static_cast<int64_t>(rank_flags));
  fill_shared<double>(W, c.lr.data(), v.lr, c.grad_norm.data(), v.grad_norm, c.grad_zero_frac.data(), v.zero_frac,
              c.param_norm.data(), v.param_norm);
  fill_shared<double>(W, c.update_norm.data(), v.update_norm, c.loss_scale.data(), v.scale_used, c.step_ms.data(), v.step_ms,
              nullptr, 0.0);
  if (hash_ranks_)
    for (const int r : *hash_ranks_)
      if (r >= 0 && r < world_) c.flags[r] = v.flags;
  fill_rows(v.s, v.index, v.loss_avg, v.t_end);
  // a rank's own gradient is fp16 before the all-reduce: it underflows as the global one does
  const uint64_t k_local = step_key(seed_, 6, v.s);
  const double gnk = v.gn * kLocalOverGlobal, kept = 1 - v.zero_frac;
  if (RunPlan::contributes_zeros(g)) {
    std::fill_n(c.local_grad_norm.data(), W, 0.0);
  } else if (g.inject_inf) {
    std::fill_n(c.local_grad_norm.data(), W, std::numeric_limits<double>::infinity());
  } else {
    gauss_draws(k_local, 0, W, Noise{gnk, 1, 0.05, kept}, c.local_grad_norm.data());
  }
  for (const int r : targeted_ranks_) {
    const StepActions& a = act(r);
    c.local_grad_norm[r] = RunPlan::contributes_zeros(a) ? 0.0
                           : a.inject_inf ? std::numeric_limits<double>::infinity()
                                          : Noise{gnk, 1, 0.05, kept}(gauss(draw(k_local, r)));
  }
  // every row carries every field; with no logger frozen every row logs step s (else seal() looks)
  bool frozen = g.freeze_logging;
  for (const int r : targeted_ranks_) frozen = frozen || act(r).freeze_logging;
  if (frozen) {
    c.seal();
  } else {
    c.all_has = StepBlock::kAllFields;
    c.lockstep = W > 0;
    c.t_max = W > 0 ? lanes_max(c.t[0], c.t.data() + 1, W - 1) : StepBlock::kNaN;  // the latest t
  }
  for (const int r : onset_ranks_) {  // the fault's onset in run time (OnsetClock reads step records)
    rec_ = Record{};
    rec_.rank = r;
    rec_.step = c.step[r];
    rec_.t = c.t[r];
    onsets_.observe(rec_);
  }
  hand_off(c);
}

// A logged step's block, counted, to the sink (through the hand-off thread where there is one).
void Walk::hand_off(StepBlock& c) {
  int64_t beats = 0;
  for (const auto& run : c.beats) beats += run.n;
  res_.step_records += static_cast<int64_t>(c.rows());
  res_.records += static_cast<int64_t>(c.rows()) + beats;
  res_.heartbeats += beats;
  if (handoff_) handoff_->rows(c);
  else sink_.write_block(c);
  c.beats.clear();
}

// The per-rank columns of a logged step: the logger's step and loss, its mean, t, the batch hash and
// the all-reduce wait.
void Walk::fill_rows(int64_t s, int64_t index, double loss_avg, double t_end) {
  StepBlock& c = rows_;
  const size_t W = static_cast<size_t>(world_);
  const StepActions& g = generic_;
  fill_logged(W, tr_.logged_step.data(), tr_.logged_loss.data(), compute_.data(), g.freeze_logging, loss_avg, cmax_,
              comm_ms_, c.step.data(), c.loss.data(), c.loss_avg.data(), c.comm_ms.data());
  unif_draws(step_key(seed_, 5, s), 0, W, Offset{t_end, 1e-4}, c.t.data());  // a fraction of a ms apart
  for (const int r : targeted_ranks_)
    c.loss_avg[r] = RunPlan::logged_loss_avg({tr_.logged_step[r], tr_.logged_loss[r]}, act(r), loss_avg);
  if (hash_ranks_) {
    for (const int r : *hash_ranks_)
      if (r >= 0 && r < world_) {
        sampler_.ids(index, r, ids_.data());
        c.batch_hash[r] = batch_hash(ids_.data(), ids_.size());
      }
  } else if (sampler_.fits32()) {  // every rank's batch: ids made and hashed in registers (lanes.h)
    uint32_t first = 0;
    const Permutation32 p = sampler_.permutation32(index, &first);
    sampler_batch_hashes(p, first, static_cast<int>(sampler_.per_rank), W, c.batch_hash.data());
  } else {
    slot_ids_.resize(static_cast<size_t>(sampler_.global));
    sampler_.slot_ids(index, slot_ids_.data());  // every rank's batch, by position
    batch_hashes(slot_ids_.data(), static_cast<int>(sampler_.per_rank), W, c.batch_hash.data());
  }
  for (const int r : targeted_ranks_)
    if (const auto own = RunPlan::replaced_batch(act(r)); own && *own != index) {
      sampler_.ids(*own, r, ids_.data());
      c.batch_hash[r] = batch_hash(ids_.data(), ids_.size());
    }
}

void Walk::fill_some(int64_t s, int64_t index, double loss_avg, double t_end, const uint64_t flags, double gn,
                     double zero_frac) {
  StepBlock& c = rows_;
  const size_t K = out_list_.size();
  c.resize(K);
  const uint64_t k_t = step_key(seed_, 5, s), k_local = step_key(seed_, 6, s);
  const double gnk = gn * kLocalOverGlobal, kept = 1 - zero_frac;
  for (size_t k = 0; k < K; ++k) {
    const int r = out_list_[k];
    const StepActions& a = act(r);
    c.rank[k] = r;
    c.param_mismatches[k] = 0;
    c.step[k] = tr_.logged_step[r];
    c.loss[k] = tr_.logged_loss[r];
    c.loss_avg[k] = RunPlan::logged_loss_avg({tr_.logged_step[r], tr_.logged_loss[r]}, a, loss_avg);
    c.t[k] = t_end + 1e-4 * unif(draw(k_t, r));
    c.comm_ms[k] = cmax_ - compute_[r] + comm_ms_;
    c.local_grad_norm[k] = RunPlan::contributes_zeros(a) ? 0.0
                           : a.inject_inf ? std::numeric_limits<double>::infinity()
                                          : gnk * (1 + 0.05 * gauss(draw(k_local, r))) * kept;
    const bool hashed = !hash_ranks_ || std::find(hash_ranks_->begin(), hash_ranks_->end(), r) != hash_ranks_->end();
    c.flags[k] = hashed ? flags : flags & ~StepBlock::kBatchHash;
    if (hashed) {
      const auto own = RunPlan::replaced_batch(a);
      sampler_.ids(own ? *own : index, r, ids_.data());
      c.batch_hash[k] = batch_hash(ids_.data(), ids_.size());
    }
  }
  for (const int r : onset_ranks_) {  // the fault's onset in run time, whether its rank writes or not
    rec_ = Record{};
    rec_.rank = r;
    rec_.step = tr_.logged_step[r];
    rec_.t = t_end + 1e-4 * unif(draw(k_t, r));
    onsets_.observe(rec_);
  }
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
      if (writes(r)) beats_until(beats_, 0, r, std::min(tau, t_err), s);
      if (t_err <= tau) {
        failed[r] = 1;
        if (r != hung)
          event(r, event::error, s - 1, t_err,
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
    if (writes(r) && next_hb_[r] < t_kill) {
      int n = 0;
      const double t0 = next_hb_[r];
      while (next_hb_[r] < t_kill) next_hb_[r] += hb_s_, ++n;
      beats_.add_beats(r, kPhaseData, s, t0, hb_s_, n);
    }
  t_ = t_kill;
  const std::string why = fmt::format("no step from any rank for {:.1f} s while records still arrive: every rank "
                                      "stopped by the launcher",
                                      bound);
  for (int r = 0; r < world_; ++r) event(r, event::stopped, s - 1, t_, why);
  res_.failed = true;
  res_.error = fmt::format("every rank blocked fetching the batch of step {}; {}", s, why);
}

void Walk::pause(const char* phase, double seconds, int64_t s) {
  const double until = t_ + seconds;
  const uint8_t id = known_phase(phase);
  for (int r = 0; r < world_; ++r)
    if (writes(r) && next_hb_[r] < until) {
      int n = 0;
      const double t0 = next_hb_[r];
      while (next_hb_[r] < until) next_hb_[r] += hb_s_, ++n;
      beats_.add_beats(r, id, s, t0, hb_s_, n);
    }
  t_ = until;
}

void Walk::flush_beats() {
  if (beats_.beats.empty()) return;
  beats_.seal();
  const int64_t n = static_cast<int64_t>(beats_.records());
  res_.records += n;
  res_.heartbeats += n;
  sink_.write_block(beats_);
  beats_.beats.clear();
}

void Walk::event(int r, const char* name, int64_t s, double t, const std::string& detail) {
  if (!writes(r)) {  // a silent rank: only its resume counts, for the onset clock
    if (std::find(onset_ranks_.begin(), onset_ranks_.end(), r) == onset_ranks_.end() || std::strcmp(name, event::resume))
      return;
    rec_ = Record{};
    rec_.kind = RecordKind::event;
    rec_.rank = r, rec_.t = t, rec_.step = s, rec_.name = name;
    onsets_.observe(rec_);
    return;
  }
  rec_ = Record{};
  rec_.kind = RecordKind::event;
  rec_.rank = r;
  rec_.t = t;
  rec_.step = s;
  rec_.name = name;
  rec_.detail = detail;
  write(rec_);
}

void Walk::write(const Record& r) {
  flush_beats();
  sink_.write(r);
  onsets_.observe(r);
  ++res_.records;
}


}  // namespace flatline::simdetail
