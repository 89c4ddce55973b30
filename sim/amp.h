// Real mixed precision (torch; only sim/ includes this): autocast around the forward pass and the
// dynamic loss scaler on tensors with the kernels torch.amp.GradScaler runs (torch/amp/grad_scaler.py):
// _amp_foreach_non_finite_check_and_unscale_ (unscale_, and the inf/nan check) and _amp_update_scale_
// (update). Used by the `kernels: aten` step (the default on CUDA); the `kernels: flatline` step on CPU
// emulates binary16 (sim/fp16.h) and keeps its scale in the plain LossScaler (run/loss_scaler.h),
// whose semantics these kernels share (tests/sim/amp_test.cpp compares them step by step).
// Nothing here reads a device value back: the caller decides when to (Comm::read).
#pragma once
#include "run/loss_scaler.h"
#include "sim/torch_pch.h"

namespace flatline {

// Autocast to `dtype` (at::kHalf | at::kBFloat16) on `device_type` for the guard's scope, as
// `with torch.autocast(device_type, dtype)`; `on` false does nothing. Autocast state is per thread.
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device_type, at::ScalarType dtype, bool on);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType type_;
  bool on_, was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

class GradScaler {
 public:
  // `settings`: scale, growth_tracker, growth/backoff factors, interval and enabled, as LossScaler's.
  GradScaler(const LossScaler& settings, at::Device device);
  bool enabled() const { return enabled_; }
  // The current scale, a float32 tensor of one element on the device (1 when disabled).
  const at::Tensor& scale() const { return scale_; }
  // grads *= 1 / scale in place; returns found_inf (float32, one element: 1 if any gradient held an
  // inf or nan). Disabled: only the check (inv_scale 1), as GradScaler._check_inf_per_device.
  at::Tensor unscale_(at::TensorList grads);
  // After unscale_: backoff or growth as GradScaler.update(); then the scale is clamped to
  // `max_scale` (the scale_clamped_low fault) and kept at or above `min_scale` (a confirmation's
  // repair; 0: none), as LossScaler::update. Disabled: nothing.
  void update(const at::Tensor& found_inf, double max_scale, double min_scale = 0);
  // The state as a LossScaler (reads the device: checkpoints), and back.
  LossScaler state() const;
  void set_state(const LossScaler& s);

 private:
  bool enabled_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  at::Tensor scale_, growth_tracker_, one_;
};

}  // namespace flatline
