#include "sim/schedule.h"

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
  return spec.min_lr + (peak - spec.min_lr) * coeff;
}

}  // namespace flatline
