// The drill's one-pass summary of a run (report/run_summary.h).
#include "report/run_summary.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace flatline {
namespace {

double opt(const std::optional<double>& v) { return v ? *v : RunSummary::kNaN; }
int8_t flag(const std::optional<bool>& v) { return v ? static_cast<int8_t>(*v) : int8_t{-1}; }

}  // namespace

RunSummary::RunSummary(int world_size) : world_hint_(world_size) {
  if (world_size > 0) {
    ranks_.resize(static_cast<size_t>(world_size));
    tracked_index_.assign(static_cast<size_t>(world_size), -1);
    const int n = std::min(world_size, kTrackedRanks);
    for (int i = 0; i < n; ++i) {
      const int r = n == world_size ? i : static_cast<int>(std::lround(static_cast<double>(i) * (world_size - 1) / (n - 1)));
      if (tracked_index_[r] >= 0) continue;
      tracked_index_[r] = static_cast<int>(tracked_.size());
      tracked_.emplace_back();
      tracked_.back().rank = r;
      tracked_ranks_.push_back(r);
    }
  }
}

std::vector<double> RunSummary::Rank::window() const {
  const int64_t n = std::min<int64_t>(norms, kWindow);
  std::vector<double> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = norms - n; i < norms; ++i) out.push_back(last_norms[static_cast<size_t>(i % kWindow)]);
  return out;
}

RunSummary::Rank& RunSummary::rank(int r) {
  if (static_cast<size_t>(r) >= ranks_.size()) {
    ranks_.resize(static_cast<size_t>(r) + 1);
    tracked_index_.resize(static_cast<size_t>(r) + 1, -1);
  }
  // A world of unknown size tracks the first kTrackedRanks ranks it sees below kTrackedRanks.
  if (world_hint_ <= 0 && r < kTrackedRanks && tracked_index_[r] < 0 && ranks_[r].step_records == 0) {
    tracked_index_[r] = static_cast<int>(tracked_.size());
    tracked_.emplace_back();
    tracked_.back().rank = r;
  }
  return ranks_[r];
}

void RunSummary::write(const Record& r) {
  if (r.rank < 0) return;
  ++records_;
  if (std::isfinite(r.t)) t_end_ = std::max(t_end_, r.t);
  Rank& k = rank(r.rank);
  switch (r.kind) {
    case RecordKind::step: {
      StepIn in;
      in.rank = r.rank, in.step = r.step, in.t = r.t;
      in.loss = r.loss_avg ? *r.loss_avg : opt(r.loss);
      in.lr = opt(r.lr), in.grad_norm = opt(r.grad_norm), in.zero_frac = opt(r.grad_zero_frac);
      in.loss_scale = opt(r.loss_scale), in.update_norm = opt(r.update_norm);
      in.overflow = flag(r.overflow), in.skipped = flag(r.skipped);
      in.has_local = r.local_grad_norm.has_value(), in.local = opt(r.local_grad_norm);
      in.has_times = r.step_ms && r.comm_ms;
      if (in.has_times) in.compute_ms = *r.step_ms - *r.comm_ms;
      in.has_hash = r.batch_hash.has_value(), in.hash = r.batch_hash.value_or(0);
      step(in, k);
      break;
    }
    case RecordKind::heartbeat: heartbeat(r.t, r.step, r.phase, k); break;
    case RecordKind::event: event(r, k); break;
    case RecordKind::eval:
      if (r.rank == series_rank_ && r.eval_loss) evals_.emplace_back(r.step, *r.eval_loss);
      break;
  }
}

void RunSummary::end(double t_end) {
  if (std::isfinite(t_end)) t_end_ = std::max(t_end_, t_end);
  for (auto& tr : tracked_)
    if (tr.in_stretch) {
      if (tr.first_stretches.size() < kStretchesKept) tr.first_stretches.push_back(tr.cur);
      tr.in_stretch = false;
    }
}

void RunSummary::step(const StepIn& r, Rank& k) {
  if (series_rank_ < 0 || r.rank < series_rank_) {  // a lower rank: its series replace what was kept
    const bool keep_events = series_rank_ < 0 && r.rank == 0;  // rank 0's events before its first step
    series_rank_ = r.rank;
    rows_.clear();
    evals_.clear();
    if (!keep_events) {
      events_.clear();
      checkpoints_ = 0;
    }
  }
  if (r.rank == series_rank_) series(r);
  const int64_t ordinal = k.step_records++;
  // ---- liveness
  const bool t_ok = std::isfinite(r.t);
  if (r.step > k.max_step) {
    k.max_step = r.step;
    k.reached_t = r.t;
  }
  if (t_ok && std::isfinite(k.prev_t) && r.t - k.prev_t > k.longest_gap_s) {
    k.longest_gap_s = r.t - k.prev_t;
    k.gap_before_step = r.step;
  }
  if (r.step == k.prev_step && t_ok && std::isfinite(k.prev_t) && r.t > k.prev_t) {
    if (++k.same_run > k.stuck_records) {
      k.stuck_records = k.same_run;
      k.stuck_step = r.step;
      k.stuck_from_t = k.same_from_t;
      k.stuck_to_t = r.t;
    }
  } else {
    k.same_run = 1;
    k.same_from_t = r.t;
  }
  k.prev_step = r.step;
  if (t_ok) k.prev_t = k.last_step_t = r.t;
  // ---- local grad norm, per rank and across ranks at this ordinal
  if (r.has_local) {
    local_norm(k, ordinal, r.step, r.local);
  }
  if (r.has_times) {
    timed_ = true;
    k.compute_ms_sum += r.compute_ms;
    ++k.timed;
  }
  if (r.has_hash) {
    hashed_ = true;
    const int ti = tracked_index_[static_cast<size_t>(r.rank)];
    if (ti >= 0) track(r, tracked_[static_cast<size_t>(ti)]);
  }
}

void RunSummary::series(const StepIn& r) {
  Row w;
  w.step = r.step;
  w.t = r.t;
  w.loss = r.loss;
  w.lr = r.lr;
  w.grad_norm = r.grad_norm;
  w.zero_frac = r.zero_frac;
  w.loss_scale = r.loss_scale;
  w.update_norm = r.update_norm;
  w.overflow = r.overflow;
  w.skipped = r.skipped;
  rows_.push_back(w);
}

// A repeat is a batch first trained at ANOTHER step; the same batch at the same step is a restart
// re-running that step (the sampler position was restored), as detectors/data_replay.cpp judges.
void RunSummary::track(const StepIn& r, Tracked& tr) {
  const uint64_t h = r.hash;
  ++tr.hashed;
  auto [it, fresh] = tr.first_seen.emplace(h, r.step);
  const int64_t first = fresh ? -1 : it->second;
  if (tr.pending_after > 0 && !tr.after_resume.empty()) {
    tr.after_resume.back().push_back({r.step, first, h});
    --tr.pending_after;
  }
  const bool repeat = !fresh && first != r.step;
  if (!fresh && first == r.step) ++tr.reruns;
  if (repeat) {
    ++tr.repeats;
    if (!tr.in_stretch) {
      tr.in_stretch = true;
      tr.cur = {r.step, r.step, 0, first, first};
      ++tr.stretches;
    }
    tr.cur.to_step = r.step;
    ++tr.cur.records;
    tr.cur.src_lo = std::min(tr.cur.src_lo, first);
    tr.cur.src_hi = std::max(tr.cur.src_hi, first);
  } else if (tr.in_stretch) {
    if (tr.first_stretches.size() < kStretchesKept) tr.first_stretches.push_back(tr.cur);
    tr.in_stretch = false;
  }
}

// A rank's local grad norm v at its `ordinal`-th step record (step s): the rank's window and zero
// count, and the spread across ranks at that ordinal.
void RunSummary::local_norm(Rank& k, int64_t ordinal, int64_t s, double v) {
  local_norms_ = true;
  k.last_norms[static_cast<size_t>(k.norms % kWindow)] = v;
  ++k.norms;
  const bool zero = v <= kZeroNorm;
  if (zero) {
    if (k.zero_norms++ == 0) k.first_zero_step = s;
  } else {
    k.last_nonzero_step = s;
  }
  if (static_cast<size_t>(ordinal) >= across_.size()) across_.resize(static_cast<size_t>(ordinal) + 1);
  Across& a = across_[static_cast<size_t>(ordinal)];
  a.step = s;
  if (std::isfinite(v)) {
    k.norm_sum += v;
    ++k.finite_norms;
    a.min = std::min(a.min, v);
    a.max = std::max(a.max, v);
    a.sum += v;
    ++a.n;
  }
  a.zeros += zero;
}

void RunSummary::heartbeat(double t, int64_t step, std::string_view phase, Rank& k) {
  ++heartbeats_;
  ++k.heartbeats;
  k.hb_t = t;
  k.hb_step = step;
  if (k.hb_phase != phase) k.hb_phase.assign(phase.data(), phase.size());
  // Every hb_stride_-th heartbeat of the run is kept; a full sample drops every other one and the
  // stride doubles, so the sample stays spread over the whole run in O(kHeartbeatSample) memory.
  if (hb_seen_++ % hb_stride_ == 0 && std::isfinite(t)) {
    hb_sample_.emplace_back(t, step);
    if (hb_sample_.size() >= kHeartbeatSample) {
      size_t j = 0;
      for (size_t i = 0; i < hb_sample_.size(); i += 2) hb_sample_[j++] = hb_sample_[i];
      hb_sample_.resize(j);
      hb_stride_ *= 2;
    }
  }
}

// step() for row i of a block in lockstep that carries every field step() reads, of a rank other than
// (and above) the series rank: the same updates, read from the columns without the checks a block in
// lockstep has made (a finite t; the series kept elsewhere).
void RunSummary::lockstep_row(const StepBlock& b, size_t i, Rank& k) {
  ++records_;
  const double t = b.t[i];
  const int64_t s = b.step[i];
  t_end_ = t_end_ < t ? t : t_end_;
  const int64_t ordinal = k.step_records++;
  if (s > k.max_step) k.max_step = s, k.reached_t = t;
  if (std::isfinite(k.prev_t) && t - k.prev_t > k.longest_gap_s) k.longest_gap_s = t - k.prev_t, k.gap_before_step = s;
  if (s == k.prev_step && std::isfinite(k.prev_t) && t > k.prev_t) {
    if (++k.same_run > k.stuck_records) {
      k.stuck_records = k.same_run;
      k.stuck_step = s;
      k.stuck_from_t = k.same_from_t;
      k.stuck_to_t = t;
    }
  } else {
    k.same_run = 1;
    k.same_from_t = t;
  }
  k.prev_step = s;
  k.prev_t = k.last_step_t = t;
  local_norm(k, ordinal, s, b.local_grad_norm[i]);
  timed_ = true;
  k.compute_ms_sum += b.step_ms[i] - b.comm_ms[i];
  ++k.timed;
  if (b.flags[i] & StepBlock::kBatchHash) {
    hashed_ = true;
    const int ti = tracked_index_[static_cast<size_t>(b.rank[i])];
    if (ti >= 0) {
      StepIn in;
      in.rank = b.rank[i], in.step = s, in.t = t, in.has_hash = true, in.hash = b.batch_hash[i];
      track(in, tracked_[static_cast<size_t>(ti)]);
    }
  }
}

// The same as write() on each record of the block, in stream order, from its columns.
void RunSummary::write_block(const StepBlock& b) {
  const size_t n = b.rows(), nb = b.beats.size();
  if (b.lockstep && n > 0) rank(static_cast<int>(n) - 1);
  size_t j = 0;
  StepIn in;
  for (size_t i = 0; i <= n; ++i) {
    for (; j < nb && b.beats[j].row <= i; ++j) {
      const StepBlock::Beats& run = b.beats[j];
      if (run.rank < 0) continue;
      Rank& k = rank(run.rank);
      const std::string_view phase = b.phase_name(run.phase);
      double t = run.t0;
      for (int m = 0; m < run.n; ++m, t += run.dt) {
        ++records_;
        if (std::isfinite(t)) t_end_ = std::max(t_end_, t);
        heartbeat(t, run.step, phase, k);
      }
    }
    if (i == n) break;
    const int r = b.rank[i];
    if (r < 0) continue;
    if (b.lockstep && world_hint_ > 0 && series_rank_ >= 0 && r > series_rank_ &&
        (b.all_has & kFastFields) == kFastFields) {
      lockstep_row(b, i, ranks_[static_cast<size_t>(r)]);
      continue;
    }
    ++records_;
    const uint64_t f = b.flags[i];
    in.rank = r, in.step = b.step[i], in.t = b.t[i];
    if (std::isfinite(in.t)) t_end_ = std::max(t_end_, in.t);
    in.loss = f & StepBlock::kLossAvg ? b.loss_avg[i] : b.loss[i];  // NaN when neither was logged
    in.lr = b.lr[i], in.grad_norm = b.grad_norm[i], in.zero_frac = b.grad_zero_frac[i];
    in.loss_scale = b.loss_scale[i], in.update_norm = b.update_norm[i];
    in.overflow = f & StepBlock::kOverflow ? static_cast<int8_t>(b.overflow(i)) : int8_t{-1};
    in.skipped = f & StepBlock::kSkipped ? static_cast<int8_t>(b.skipped(i)) : int8_t{-1};
    in.has_local = f & StepBlock::kLocalGradNorm, in.local = b.local_grad_norm[i];
    in.has_times = (f & StepBlock::kStepMs) && (f & StepBlock::kCommMs);
    in.compute_ms = b.step_ms[i] - b.comm_ms[i];
    in.has_hash = f & StepBlock::kBatchHash, in.hash = b.batch_hash[i];
    step(in, rank(r));
  }
}

void RunSummary::event(const Record& r, Rank& k) {
  if (r.name == event::error) {
    if (k.errors++ == 0) {
      k.error_t = r.t;
      k.error_detail = r.detail;
    }
  } else if (r.name == event::run_end) {
    k.run_end_t = r.t;
  } else if (r.name == event::resume) {
    const int ti = static_cast<size_t>(r.rank) < tracked_index_.size() ? tracked_index_[r.rank] : -1;
    if (ti >= 0) {
      Tracked& tr = tracked_[static_cast<size_t>(ti)];
      tr.after_resume.emplace_back();
      tr.pending_after = kAfterResume;
    }
  }
  if (series_rank_ >= 0 && r.rank != series_rank_) return;
  if (series_rank_ < 0 && r.rank != 0) return;  // before any step record: rank 0's events only
  if (r.name == event::checkpoint_save) {
    ++checkpoints_;
    return;
  }
  static const char* kKept[] = {event::run_start, event::stop_for_restart, event::resume, event::checkpoint_load,
                                event::run_end,   event::error};
  for (const char* n : kKept)
    if (r.name == n) {
      events_.push_back({r.name, r.detail, r.step, r.t});
      return;
    }
}

size_t RunSummary::bytes() const {
  size_t b = sizeof(*this) + rows_.capacity() * sizeof(Row) + across_.capacity() * sizeof(Across) +
             hb_sample_.capacity() * sizeof(hb_sample_[0]) + evals_.capacity() * sizeof(evals_[0]) +
             ranks_.capacity() * sizeof(Rank) + tracked_index_.capacity() * sizeof(int);
  auto heap = [](const std::string& x) { return x.capacity() > 15 ? x.capacity() + 1 : 0; };  // past the SSO buffer
  for (const auto& e : events_) b += sizeof(Event) + heap(e.detail);
  for (const auto& k : ranks_) b += heap(k.hb_phase) + heap(k.error_detail);
  for (const auto& t : tracked_) {
    b += sizeof(Tracked) + t.first_seen.bucket_count() * sizeof(void*) + t.first_seen.size() * 32;
    for (const auto& a : t.after_resume) b += a.capacity() * sizeof(AfterResume);
  }
  return b;
}


int64_t RunSummary::restarts() const {
  return std::count_if(events_.begin(), events_.end(), [](const Event& e) { return e.name == event::resume; });
}

int64_t RunSummary::last_step() const {
  int64_t s = -1;
  for (const auto& k : ranks_) s = std::max(s, k.max_step);
  return s;
}

}  // namespace flatline
