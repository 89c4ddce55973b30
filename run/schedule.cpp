#include "run/schedule.h"

#include <algorithm>
#include <cmath>

namespace flatline {

double LrSchedule::lr(int64_t k) const {
  if (k < 0) k = 0;
  if (k < spec.warmup) return peak * static_cast<double>(k) / static_cast<double>(spec.warmup);
  if (spec.kind == "constant") return peak;
  const int64_t span = spec.total - spec.warmup;
  double p = span <= 0 ? 1.0 : static_cast<double>(k - spec.warmup) / static_cast<double>(span);
  p = std::clamp(p, 0.0, 1.0);
  const double coeff = spec.kind == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
  // min_lr + (peak - min_lr) * coeff, written as a blend so that coeff 1 (end of warmup) gives exactly
  // peak and coeff 0 gives exactly min_lr: fault truths compare schedules with ==, and
  // min_lr + (peak - min_lr) can be one ulp off peak (peak 1e-2, min_lr 1e-3).
  return peak * coeff + spec.min_lr * (1.0 - coeff);
}

}  // namespace flatline
