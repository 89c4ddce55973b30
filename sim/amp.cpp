#include "sim/amp.h"

#include <ATen/autocast_mode.h>

#include <limits>

namespace flatline {

AutocastGuard::AutocastGuard(at::DeviceType type, at::ScalarType dtype, bool on) : type_(type), on_(on) {
  if (!on_) return;
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!on_) return;
  // torch.autocast.__exit__: the cache of casted weights lives until the outermost region ends
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
}

GradScaler::GradScaler(const LossScaler& s, at::Device device)
    : enabled_(s.enabled),
      growth_factor_(s.growth_factor),
      backoff_factor_(s.backoff_factor),
      growth_interval_(s.growth_interval) {
  const auto f = at::TensorOptions().dtype(at::kFloat).device(device);
  scale_ = at::full({1}, enabled_ ? s.scale : 1.0, f);
  growth_tracker_ = at::full({1}, s.growth_tracker, f.dtype(at::kInt));  // GradScaler's int32 tracker
  one_ = at::ones({1}, f);
}

at::Tensor GradScaler::unscale_(at::TensorList grads) {
  at::Tensor found_inf = at::zeros_like(one_);
  // GradScaler.unscale_: inv_scale = 1 / scale computed in double, then float32 (grad_scaler.py)
  const at::Tensor inv = enabled_ ? scale_.to(at::kDouble).reciprocal().to(at::kFloat) : one_;
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
  return found_inf;
}

void GradScaler::update(const at::Tensor& found_inf, double max_scale) {
  if (!enabled_) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, growth_factor_, backoff_factor_, growth_interval_);
  if (max_scale < std::numeric_limits<double>::infinity()) scale_.clamp_max_(max_scale);
}

LossScaler GradScaler::state() const {
  LossScaler s;
  s.enabled = enabled_;
  s.growth_factor = growth_factor_;
  s.backoff_factor = backoff_factor_;
  s.growth_interval = growth_interval_;
  s.scale = scale_.item<double>();
  s.growth_tracker = growth_tracker_.item<int64_t>();
  return s;
}

void GradScaler::set_state(const LossScaler& s) {
  scale_.fill_(enabled_ ? s.scale : 1.0);
  growth_tracker_.fill_(s.growth_tracker);
}

}  // namespace flatline
