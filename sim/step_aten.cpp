// The `kernels: aten` step (sim/step.h): ATen's kernels on the scenario's device, real autocast and
// the GradScaler's kernels (sim/amp.h), the fused optimizers (sim/optimizer.h). Every gradient is a view
// into one flat buffer (DDP's gradient_as_bucket_view): backward accumulates into it, and the
// all-reduce and the statistics each take it in one op; its last element carries the loss through the
// all-reduce. The optimizer follows GradScaler + clip_grad_norm_: unscale_ (its kernel: unscale +
// check), clip_grad_norm_, then step() only when the check found nothing, which is the one wait for the
// device a GradScaler step has (fp16). A step's telemetry scalars stay on the device until its record
// is completed at the next step (bench/README.md, "How the telemetry avoids stalls on the GPU").
#include <optional>

#include "sim/amp.h"
#include "sim/step.h"

namespace flatline {
namespace {

// A step's telemetry scalars on the device (each float64, one value), gathered in Scalar's layout.
struct StepDeviceScalars {
  at::Tensor loss, loss_avg, local_sq, zeros, found_inf, mismatch, scale_used, requests;
  at::Tensor gather(const at::Tensor& grad_norm, const at::Tensor& norms_sq, at::Device dev) const {
    const at::Tensor zero = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev));
    std::vector<at::Tensor> v(kScalars, zero);
    auto set = [&](Scalar i, const at::Tensor& t) {
      if (t.defined()) v[i] = t.to(at::kDouble).reshape({});
    };
    set(kLoss, loss);
    set(kLossAvg, loss_avg);
    if (local_sq.defined() && scale_used.defined()) set(kLocalGradNorm, local_sq.sqrt() / scale_used);
    set(kGradNorm, grad_norm);
    set(kZeros, zeros);
    set(kFoundInf, found_inf);
    if (norms_sq.defined()) {
      set(kUpdateSq, norms_sq[0]);
      set(kParamSq, norms_sq[1]);
    }
    set(kMismatch, mismatch);
    set(kScaleUsed, scale_used);
    set(kCheckpointRequests, requests);
    return at::stack(v);
  }
};

int64_t numel_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

class AtenStep final : public StepPath {
 public:
  explicit AtenStep(const StepContext& c)
      : c_(c),
        dev_(c.comm.device()),
        world_(c.comm.world_size()),
        numel_(numel_of(c.params)),
        flat_grad_(at::zeros({numel_ + 1}, at::TensorOptions().dtype(at::kFloat).device(dev_))),
        flat_g_(flat_grad_.slice(0, 0, numel_)),
        opt_(c.sc.optimizer, c.params, /*aten=*/true),
        autocast_(c.sc.precision != "fp32"),
        amp_dtype_(c.sc.precision == "bf16" ? at::kBFloat16 : at::kHalf) {
    int64_t off = 0;  // every parameter's gradient a view into flat_grad_, in parameter order
    for (auto& p : c_.params) {
      p.mutable_grad() = flat_grad_.slice(0, off, off + p.numel()).view_as(p);
      off += p.numel();
    }
    c_.model.set_precision("fp32");  // real autocast instead of the binary16 emulation
    c_.model.set_aten_kernels(true);
  }
  Optimizer& optimizer() override { return opt_; }
  void start(const LossScaler& s) override { scaler_.emplace(s, dev_); }
  LossScaler scaler_state() const override { return scaler_->state(); }

  void forward_backward(const TrainData& data, const std::vector<int64_t>& ids, const StepActions& act) override {
    flat_grad_.zero_();
    const int per_micro = c_.sc.batch_size, accum = c_.sc.grad_accum;
    for (int m = 0; m < accum; ++m) {
      auto [x, y] = data.batch(ids.data() + m * per_micro, per_micro, false);
      c_.model.set_inject_inf(act.inject_inf && m == 0);
      at::Tensor loss;
      {
        AutocastGuard amp(dev_.type(), amp_dtype_, autocast_);
        loss = c_.model.loss(x.to(dev_, /*non_blocking=*/true), y.to(dev_, /*non_blocking=*/true));
      }
      loss_acc_ = m == 0 ? loss.detach().clone() : loss_acc_.add_(loss.detach());
      // GradScaler.scale(loss), and the mean over micro-batches
      if (!act.skip_backward)
        (c_.counters.scaler.enabled || accum > 1 ? loss * (scaler_->scale() / accum) : loss).backward();
    }
  }

  // The device's time, not the launches'.
  void wait_for_device() override { c_.comm.read(flat_grad_.slice(0, 0, 1), "the straggler's backward"); }

  void finish_local(bool send_zeros) override {
    if (send_zeros) flat_grad_.zero_();
    dv_ = StepDeviceScalars{};
    if (c_.telemetry) dv_.local_sq = at::linalg_vector_norm(flat_g_).to(at::kDouble).square();
  }

  void all_reduce() override {
    flat_grad_.slice(0, numel_).copy_(loss_acc_.div_(c_.sc.grad_accum).reshape({1}));
    if (c_.telemetry) dv_.loss = loss_acc_.to(at::kDouble);
    if (world_ > 1) {
      c_.comm.allreduce_sum(flat_grad_);
      flat_grad_.div_(world_);
    }
    if (c_.telemetry) dv_.loss_avg = flat_grad_.slice(0, numel_).to(at::kDouble).reshape({});
  }

  UpdateDecision optimizer_step(const StepActions& act) override {
    if (c_.telemetry) {
      dv_.zeros = (numel_ - at::count_nonzero(flat_g_)).to(at::kDouble);
      dv_.scale_used = scaler_->scale().to(at::kDouble).reshape({});  // a copy: update() changes it in place
    }
    const at::Tensor found = scaler_->unscale_({flat_g_});
    grad_norm_ = at::linalg_vector_norm(flat_g_);
    scaler_->update(found, act.max_loss_scale, act.min_loss_scale);
    if (c_.telemetry) dv_.found_inf = found.to(at::kDouble).reshape({});
    bool found_inf = false;
    if (c_.counters.scaler.enabled)
      found_inf = c_.comm.read(found, "the all-reduce and overflow check").item<float>() != 0;
    // the device's scaler decided; the counters' scaler is written at checkpoints (scaler_state)
    const UpdateDecision upd = c_.plan.count(c_.counters, act, /*skip=*/found_inf);
    norms_ = UpdateNorms{};
    const bool want_norms = c_.telemetry || world_ > 1;  // logged; the cross-rank checksum
    if (!upd.skip) {
      const double clip = c_.sc.optimizer.grad_clip;
      if (clip > 0)  // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1
        flat_g_.mul_((clip / (grad_norm_ + 1e-6)).clamp_max(1.0));
      norms_ = opt_.step(upd.lr, 1.0, want_norms);
    } else if (want_norms) {
      norms_.sq = at::stack({at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev_)),
                             sum_sq_on_device(c_.params)});
    }
    return upd;
  }

  // The checksum is the squared parameter norm, on the device; its max and -min over ranks differ
  // when any rank's does. The requests ride along and come back with the step's scalars.
  void check_consistency(int64_t requests) override {
    const auto f64 = at::TensorOptions().dtype(at::kDouble).device(dev_);
    if (world_ == 1) {
      if (requests > 0) dv_.requests = at::full({}, static_cast<double>(requests), f64);
      return;
    }
    const at::Tensor asked = at::full({}, static_cast<double>(requests), f64);
    at::Tensor c = at::stack({norms_.sq[1], -norms_.sq[1], asked});
    c_.comm.allreduce_max(c);
    dv_.mismatch = (c[0] != -c[1]).to(at::kDouble);
    dv_.requests = c[2];
  }

  void record(PendingRecord p) override {
    p.numel = numel_;
    flush(/*arrived_only=*/false);  // the step before: long done on the device by now
    p.r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p.t_step).count();
    pending_ = std::move(p);
    if (c_.telemetry || world_ > 1) {
      scalars_ = c_.comm.start_read(dv_.gather(grad_norm_, norms_.sq, dev_));
    } else {  // bare (one rank, no telemetry): wait, so that step_ms is the device's time, not the launches'
      c_.comm.read(flat_grad_.slice(0, 0, 1), "the step");
      c_.recorder.uncounted();
    }
  }

  void flush(bool arrived_only) override {
    if (!scalars_) return;
    if (arrived_only && scalars_.done && !scalars_.done->query()) return;
    const at::Tensor h = c_.comm.finish_read(scalars_, "reading back a step's telemetry scalars");
    scalars_ = Readback{};
    pending_.r.t = c_.clock.t();  // when it is written: the file keeps the order of t (heartbeats came between)
    c_.recorder.complete(pending_, h.data_ptr<double>());
  }

  at::Tensor eval_loss(const at::Tensor& x, const at::Tensor& y) override {
    AutocastGuard amp(dev_.type(), amp_dtype_, autocast_);
    return c_.model.loss(x.to(dev_, /*non_blocking=*/true), y.to(dev_, /*non_blocking=*/true));
  }

 private:
  StepContext c_;
  const at::Device dev_;
  const int world_;
  const int64_t numel_;
  at::Tensor flat_grad_, flat_g_;  // the gradients and the loss; the gradients alone
  Optimizer opt_;
  const bool autocast_;
  const at::ScalarType amp_dtype_;
  std::optional<GradScaler> scaler_;  // the loss scaler on the device, from start()
  // this step's
  at::Tensor loss_acc_, grad_norm_;
  StepDeviceScalars dv_;
  UpdateNorms norms_;
  // the last step's record, waiting for its scalars
  PendingRecord pending_;
  Readback scalars_;
};

}  // namespace

std::unique_ptr<StepPath> make_aten_step(const StepContext& c) { return std::make_unique<AtenStep>(c); }

}  // namespace flatline
