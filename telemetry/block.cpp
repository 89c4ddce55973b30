// StepBlock (block.h): records in and out of columns.
#include "telemetry/block.h"

#include <cmath>

namespace flatline {
namespace {

// Clears what a record of another kind may have set: a Record reused for the next one of a stream.
void reset_for(Record& out, RecordKind k) {
  if (out.kind != k) {
    out = Record{};
    out.kind = k;
  }
}

template <class T>
std::optional<T> opt(bool present, T v) {
  return present ? std::optional<T>(v) : std::nullopt;
}

}  // namespace

void StepBlock::clear() {
  rank.clear(), step.clear(), t.clear(), flags.clear();
  opt_step.clear(), epoch.clear(), samples_seen.clear(), param_mismatches.clear();
  loss.clear(), loss_avg.clear(), lr.clear(), grad_norm.clear(), local_grad_norm.clear(), grad_zero_frac.clear();
  param_norm.clear(), update_norm.clear(), loss_scale.clear(), step_ms.clear(), comm_ms.clear();
  batch_hash.clear();
  beats.clear();
  phase_names.clear();
  all_has = 0;
  lockstep = false;
  t_max = kNaN;
}

void StepBlock::resize(size_t n) {
  rank.resize(n, 0), step.resize(n, 0), t.resize(n, kNaN), flags.resize(n, 0);
  opt_step.resize(n, 0), epoch.resize(n, 0), samples_seen.resize(n, 0), param_mismatches.resize(n, 0);
  for (auto* c : {&loss, &loss_avg, &lr, &grad_norm, &local_grad_norm, &grad_zero_frac, &param_norm, &update_norm,
                  &loss_scale, &step_ms, &comm_ms})
    c->resize(n, kNaN);
  batch_hash.resize(n, 0);
}

void StepBlock::seal() {  // reductions without early exits: loops that vectorise
  const size_t n = rows();
  uint64_t all = kAllFields;
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) all &= flags[i];
  for (size_t i = 0; i < n; ++i) off += (rank[i] != static_cast<int32_t>(i)) | (step[i] != step[0]);
  for (size_t i = 0; i < n; ++i) off += !(t[i] - t[i] == 0);  // NaN or inf
  all_has = n ? all : 0;
  lockstep = n > 0 && off == 0;
  t_max = kNaN;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(t[i]) && !(t[i] <= t_max)) t_max = t[i];
}

uint8_t StepBlock::phase_id(std::string_view name) {
  const uint8_t k = known_phase(name);
  if (k != kOtherPhase) return k;
  for (size_t i = 0; i < phase_names.size(); ++i)
    if (phase_names[i] == name) return static_cast<uint8_t>(kOtherPhase + i);
  if (phase_names.size() >= 255 - kOtherPhase) return kPhaseNone;  // absurdly many names in one block
  phase_names.emplace_back(name);
  return static_cast<uint8_t>(kOtherPhase + phase_names.size() - 1);
}

void StepBlock::add_beats(int r, uint8_t phase, int64_t s, double t0, double dt, int n) {
  if (n <= 0) return;
  double last = t0;
  for (int k = 1; k < n; ++k) last += dt;
  beats.push_back({r, phase, n, static_cast<uint32_t>(rows()), s, t0, dt, last});
}

bool StepBlock::append(const Record& r) {
  if (r.kind == RecordKind::heartbeat) {
    const uint8_t ph = phase_id(r.phase);
    const uint32_t row = static_cast<uint32_t>(rows());
    if (!beats.empty()) {
      Beats& b = beats.back();
      if (b.row == row && b.rank == r.rank && b.phase == ph && b.step == r.step && std::isfinite(r.t) &&
          std::isfinite(b.t_last)) {
        const double dt = b.n == 1 ? r.t - b.t0 : b.dt;
        if (b.t_last + dt == r.t) {  // exactly the watchdog's next beat: the run goes on
          b.dt = dt;
          b.t_last = r.t;
          ++b.n;
          return true;
        }
      }
    }
    beats.push_back({r.rank, ph, 1, row, r.step, r.t, 0, r.t});
    return true;
  }
  if (r.kind != RecordKind::step) return false;
  uint64_t h = 0;
  auto d = [&h](const std::optional<double>& v, uint64_t bit) {
    if (!v) return kNaN;
    h |= bit;
    return *v;
  };
  auto i64 = [&h](const std::optional<int64_t>& v, uint64_t bit) -> int64_t {
    if (!v) return 0;
    h |= bit;
    return *v;
  };
  rank.push_back(r.rank);
  step.push_back(r.step);
  t.push_back(r.t);
  opt_step.push_back(i64(r.opt_step, kOptStep));
  epoch.push_back(i64(r.epoch, kEpoch));
  samples_seen.push_back(i64(r.samples_seen, kSamplesSeen));
  param_mismatches.push_back(i64(r.param_mismatches, kParamMismatches));
  loss.push_back(d(r.loss, kLoss));
  loss_avg.push_back(d(r.loss_avg, kLossAvg));
  lr.push_back(d(r.lr, kLr));
  grad_norm.push_back(d(r.grad_norm, kGradNorm));
  local_grad_norm.push_back(d(r.local_grad_norm, kLocalGradNorm));
  grad_zero_frac.push_back(d(r.grad_zero_frac, kGradZeroFrac));
  param_norm.push_back(d(r.param_norm, kParamNorm));
  update_norm.push_back(d(r.update_norm, kUpdateNorm));
  loss_scale.push_back(d(r.loss_scale, kLossScale));
  step_ms.push_back(d(r.step_ms, kStepMs));
  comm_ms.push_back(d(r.comm_ms, kCommMs));
  if (r.overflow) h |= kOverflow | (*r.overflow ? kOverflowValue : 0);
  if (r.skipped) h |= kSkipped | (*r.skipped ? kSkippedValue : 0);
  batch_hash.push_back(r.batch_hash ? (h |= kBatchHash, *r.batch_hash) : uint64_t{0});
  flags.push_back(h);
  return true;
}

void StepBlock::row_record(size_t i, Record& out) const {
  reset_for(out, RecordKind::step);
  const uint64_t h = flags[i];
  out.rank = rank[i];
  out.t = t[i];
  out.step = step[i];
  out.opt_step = opt(h & kOptStep, opt_step[i]);
  out.loss = opt(h & kLoss, loss[i]);
  out.loss_avg = opt(h & kLossAvg, loss_avg[i]);
  out.lr = opt(h & kLr, lr[i]);
  out.grad_norm = opt(h & kGradNorm, grad_norm[i]);
  out.local_grad_norm = opt(h & kLocalGradNorm, local_grad_norm[i]);
  out.grad_zero_frac = opt(h & kGradZeroFrac, grad_zero_frac[i]);
  out.param_norm = opt(h & kParamNorm, param_norm[i]);
  out.update_norm = opt(h & kUpdateNorm, update_norm[i]);
  out.loss_scale = opt(h & kLossScale, loss_scale[i]);
  out.overflow = opt<bool>(h & kOverflow, (h & kOverflowValue) != 0);
  out.skipped = opt<bool>(h & kSkipped, (h & kSkippedValue) != 0);
  out.batch_hash = opt(h & kBatchHash, batch_hash[i]);
  out.epoch = opt(h & kEpoch, epoch[i]);
  out.samples_seen = opt(h & kSamplesSeen, samples_seen[i]);
  out.step_ms = opt(h & kStepMs, step_ms[i]);
  out.comm_ms = opt(h & kCommMs, comm_ms[i]);
  out.param_mismatches = opt(h & kParamMismatches, param_mismatches[i]);
}

void StepBlock::beat_record(const Beats& b, double bt, Record& out) const {
  reset_for(out, RecordKind::heartbeat);
  out.rank = b.rank;
  out.t = bt;
  out.step = b.step;
  const std::string_view p = phase_name(b.phase);
  if (out.phase != p) out.phase.assign(p.data(), p.size());
}

size_t StepBlock::records() const {
  size_t n = rows();
  for (const Beats& b : beats) n += static_cast<size_t>(b.n);
  return n;
}

}  // namespace flatline
