// The optimizers the harness trains with, fused: a few Eigen loops over each parameter tensor, while it
// is in cache, apply the update, advance the optimizer state and yield the norms the telemetry logs
// (update norm, parameter norm), so logging them needs no copy of the parameters. Why fused: at the small GPT
// of the scenarios (28 tensors, 0.12 M parameters) torch::optim issued ~300 small ops a step and the
// telemetry another ~300 (a parameter copy, per-tensor norms and zero counts); see bench/README.md.
//  - AdamW: PyTorch torch.optim.AdamW / torch::optim::AdamW (1.13): decoupled weight decay
//    p <- p (1 - lr wd); m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2;
//    p <- p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps). amsgrad is not supported.
//  - SGD: torch.optim.SGD with momentum (dampening 0, no Nesterov), coupled weight decay:
//    d = g + wd p; buf <- d at the first step, else momentum buf + d; p <- p - lr buf.
// Results agree with torch::optim to float rounding (tests/sim/optimizer_test.cpp); the order of
// operations differs, so they are not bit-identical to it. Same inputs -> bit-identical outputs.
// Parameters must be contiguous float32 (the harness's models are); the gradient is read from each
// parameter's .grad(), multiplied by `grad_mult` (the loss-scale unscale and the clip coefficient).
// With `aten` (the `kernels: aten` step, any device): the same updates by ATen's fused kernels, as
// torch.optim.AdamW(fused=True) / SGD(fused=True) run them (_fused_adamw_, _fused_sgd_; one launch
// for all tensors on CUDA); the gradients arrive unscaled and clipped (grad_mult 1), and the norms
// stay on the device (UpdateNorms::sq) until the caller reads them back.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "run/scenario.h"
#include "sim/torch_pch.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace flatline {

// Sum of squares, zero count and finiteness of a set of float32 tensors in one pass (float lanes,
// fixed order: deterministic). `full` = false computes the sum of squares (and finiteness) only. A
// finite tensor whose squares overflow float is summed again in double, so sum_sq is inf or nan only
// when an element is.
struct TensorStats {
  double sum_sq = 0;
  int64_t zeros = 0, numel = 0;
  bool finite = true;
};
TensorStats tensor_stats(const std::vector<at::Tensor>& ts, bool full = true);

struct UpdateNorms {
  double update_sq = 0;  // ||p_new - p_old||^2 over all parameters (the step actually taken)
  double param_sq = 0;   // ||p_new||^2
  at::Tensor sq;         // aten: [update_sq, param_sq], float64 on the parameters' device (undefined: host)
};
// ||p||^2 over all tensors, float64 on their device, not read back (aten).
at::Tensor sum_sq_on_device(const std::vector<at::Tensor>& ts);

class Optimizer {
 public:
  // Throws std::invalid_argument naming the parameter if one is not contiguous float32.
  Optimizer(const OptimizerSpec& spec, std::vector<at::Tensor> params, bool aten = false);
  // One update at learning rate `lr` with gradients g = grad_mult * p.grad().
  // `norms` = false skips the two sums (the bare step of measure_step_ms).
  UpdateNorms step(double lr, double grad_mult = 1.0, bool norms = true);
  int64_t steps() const { return steps_; }
  // State as named records ("kind", "tensors", "step", "m.<i>", "v.<i>") in a torch archive. load()
  // throws std::runtime_error if the state is for another optimizer kind or number of tensors, or a
  // tensor's shape differs (the parameters are not modified then).
  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

 private:
  UpdateNorms step_aten(double lr, bool norms);
  OptimizerSpec spec_;
  bool aten_;
  std::vector<at::Tensor> params_, m_, v_;  // v_ unused by SGD; m_ is SGD's momentum buffer
  std::vector<at::Tensor> prev_;            // aten: the parameters before the step (update norm)
  at::Tensor step_t_;                       // aten: the step count the fused AdamW kernel reads
  int64_t steps_ = 0;
};

}  // namespace flatline
