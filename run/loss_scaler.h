// Dynamic loss scaler with PyTorch GradScaler semantics (torch/amp/grad_scaler.py defaults):
// init_scale 2^16, growth_factor 2.0, backoff_factor 0.5, growth_interval 2000.
// Each step: if the unscaled gradients hold inf/nan, the optimizer step is skipped, scale *= backoff
// and the clean-step counter resets; otherwise the counter increments and, when it reaches
// growth_interval, scale *= growth and the counter resets. Plain C++, shared with the simulator.
#pragma once
#include <cstdint>
#include <limits>

namespace flatline {

struct LossScaler {
  double scale = 65536.0;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;  // consecutive clean steps since the last change
  bool enabled = true;

  // Applies one step's outcome; returns true when the optimizer step must be skipped.
  // `max_scale` clamps the scale after the update (a fault: scale_clamped_low); `min_scale` is a floor
  // under it (a confirmation's repair, as DeepSpeed's min_loss_scale and Megatron-LM's --min-loss-scale).
  bool update(bool found_inf, double max_scale = std::numeric_limits<double>::infinity(), double min_scale = 0) {
    if (!enabled) return false;
    if (found_inf) {
      scale *= backoff_factor;
      growth_tracker = 0;
    } else if (++growth_tracker == growth_interval) {
      scale *= growth_factor;
      growth_tracker = 0;
    }
    if (scale > max_scale) scale = max_scale;
    if (scale < min_scale) scale = min_scale;
    return found_inf;
  }
};

}  // namespace flatline
