// The `kernels: flatline` step (sim/step.h): the harness's own kernels on the CPU, the loss scaler on
// the host (the counters' LossScaler), and each step's record complete when the step ends. One pass
// over the (still scaled) gradients gives the norm, the zero count and the overflow check; the unscale
// and the clip coefficient are applied inside the optimizer's own pass (sim/optimizer.h).
#include <cmath>

#include "sim/step.h"

namespace flatline {
namespace {

// The gradient multiplier the optimizer applies: the loss-scale unscale (GradScaler.unscale_) and, when
// the unscaled global norm exceeds the clip, torch.nn.utils.clip_grad_norm_'s max_norm / (norm + 1e-6).
double grad_multiplier(double loss_scale, double grad_norm, double clip) {
  const double coef = clip > 0 && grad_norm > clip ? clip / (grad_norm + 1e-6) : 1.0;
  return coef / loss_scale;
}

class FlatlineStep final : public StepPath {
 public:
  explicit FlatlineStep(const StepContext& c) : c_(c), world_(c.comm.world_size()), opt_(c.sc.optimizer, c.params) {
    c_.model.set_precision(c_.sc.precision);  // binary16 emulated at module boundaries (sim/fp16.h)
    c_.model.set_aten_kernels(false);
  }
  Optimizer& optimizer() override { return opt_; }
  void start(const LossScaler&) override {}  // the scaler is the counters' own
  LossScaler scaler_state() const override { return c_.counters.scaler; }

  void forward_backward(const TrainData& data, const std::vector<int64_t>& ids, const StepActions& act) override {
    for (auto& p : c_.params) p.mutable_grad().reset();  // set_to_none: backward assigns instead of adding
    const int per_micro = c_.sc.batch_size;
    loss_sum_ = 0;
    for (int m = 0; m < c_.sc.grad_accum; ++m) {
      auto [x, y] = data.batch(ids.data() + m * per_micro, per_micro, false);
      c_.model.set_inject_inf(act.inject_inf && m == 0);
      at::Tensor loss = c_.model.loss(x, y);
      if (c_.telemetry || world_ > 1) loss_sum_ += loss.item<double>();  // logged; all-reduced with the grads
      const double factor = c_.counters.scaler.scale / c_.sc.grad_accum;  // fp16 loss scale; mean over micro-batches
      if (!act.skip_backward) (factor == 1.0 ? loss : loss * factor).backward();
    }
    for (auto& p : c_.params)
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
  }

  void wait_for_device() override {}  // the host ran the step

  void finish_local(bool send_zeros) override {
    if (send_zeros)
      for (auto& p : c_.params) p.mutable_grad().zero_();
    grads_.clear();
    for (auto& p : c_.params) grads_.push_back(p.grad());
    // This rank's own gradient, before the all-reduce; grads stay scaled. Zero count and overflow
    // check: telemetry, and the fp16 scaler's skip decision.
    full_stats_ = c_.telemetry || c_.counters.scaler.enabled;
    local_ = tensor_stats(grads_, /*full=*/world_ == 1 && full_stats_);
    local_grad_norm_ = std::sqrt(local_.sum_sq) / c_.counters.scaler.scale;
    loss_ = loss_sum_ / c_.sc.grad_accum;
  }

  // One flat buffer, one collective (as DDP's gradient buckets), the loss riding along.
  void all_reduce() override {
    loss_avg_ = loss_;
    if (world_ == 1) return;
    std::vector<at::Tensor> flat_parts;
    for (auto& g : grads_) flat_parts.push_back(g.reshape({-1}));
    flat_parts.push_back(at::full({1}, loss_, at::kFloat));
    at::Tensor flat = at::cat(flat_parts);
    c_.comm.allreduce_sum(flat);
    flat.div_(world_);
    int64_t off = 0;
    for (auto& g : grads_) {
      g.copy_(flat.slice(0, off, off + g.numel()).view_as(g));
      off += g.numel();
    }
    loss_avg_ = flat[flat.numel() - 1].item<double>();
  }

  UpdateDecision optimizer_step(const StepActions& act) override {
    scale_used_ = c_.counters.scaler.scale;
    global_ = world_ == 1 ? local_ : tensor_stats(grads_, full_stats_);
    found_inf_ = !global_.finite;
    grad_norm_ = std::sqrt(global_.sum_sq) / scale_used_;
    const UpdateDecision upd = c_.plan.update(c_.counters, act, found_inf_);
    norms_ = UpdateNorms{};
    const bool want_norms = c_.telemetry || world_ > 1;  // logged; the cross-rank checksum
    if (!upd.skip) norms_ = opt_.step(upd.lr, grad_multiplier(scale_used_, grad_norm_, c_.sc.optimizer.grad_clip), want_norms);
    else if (want_norms) norms_.param_sq = tensor_stats(c_.params, /*full=*/false).sum_sq;
    return upd;
  }

  // The checksum is the squared parameter norm the optimizer summed in a fixed order: bit-identical
  // parameters give bit-identical sums (necessary, not sufficient; a diverged rank differs at once).
  void check_consistency(int64_t requests) override {
    mismatch_ = false;
    requests_ = static_cast<double>(requests);
    if (world_ == 1) return;
    const double checksum = norms_.param_sq;
    at::Tensor c = at::tensor({checksum, -checksum, requests_}, at::kDouble);
    c_.comm.allreduce_max(c);
    mismatch_ = c[0].item<double>() != -c[1].item<double>();
    requests_ = c[2].item<double>();
  }

  void record(PendingRecord p) override {
    p.numel = global_.numel;
    double v[kScalars] = {};
    v[kLoss] = loss_;
    v[kLossAvg] = loss_avg_;
    v[kLocalGradNorm] = local_grad_norm_;
    v[kGradNorm] = grad_norm_;
    v[kZeros] = static_cast<double>(global_.zeros);
    v[kFoundInf] = found_inf_;
    v[kUpdateSq] = norms_.update_sq;
    v[kParamSq] = norms_.param_sq;
    v[kMismatch] = mismatch_;
    v[kScaleUsed] = scale_used_;
    v[kCheckpointRequests] = requests_;
    p.r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p.t_step).count();
    c_.recorder.complete(p, v);
  }
  void flush(bool) override {}  // nothing is ever pending

  at::Tensor eval_loss(const at::Tensor& x, const at::Tensor& y) override { return c_.model.loss(x, y); }

 private:
  StepContext c_;
  const int world_;
  Optimizer opt_;
  // this step's
  std::vector<at::Tensor> grads_;
  double loss_sum_ = 0, loss_ = 0, loss_avg_ = 0, local_grad_norm_ = 0, grad_norm_ = 0, scale_used_ = 1, requests_ = 0;
  bool full_stats_ = false, found_inf_ = false, mismatch_ = false;
  TensorStats local_, global_;
  UpdateNorms norms_;
};

}  // namespace

std::unique_ptr<StepPath> make_flatline_step(const StepContext& c) { return std::make_unique<FlatlineStep>(c); }

}  // namespace flatline
