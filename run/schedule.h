// LR schedules (plain C++, shared by the trainer, the faults and the simulator).
// lr(k) is the learning rate of the k-th optimizer update, k = 0, 1, ... (so logged global step s,
// 1-based, trains with lr(s - 1)). Formulas:
//   warmup (k < warmup):  peak * k / warmup      (HF transformers get_*_schedule_with_warmup; lr(0) = 0)
//   cosine:  min_lr + (peak - min_lr) * 0.5 * (1 + cos(pi * p)),  p = (k - warmup) / (total - warmup)
//            (Megatron-LM OptimizerParamScheduler with a min_lr floor; HF's with min_lr = 0)
//   linear:  min_lr + (peak - min_lr) * (1 - p)
//   constant: peak after warmup
// p is clamped to [0, 1]: past `total` the schedule stays at min_lr.
#pragma once
#include <cstdint>

#include "run/scenario.h"

namespace flatline {

struct LrSchedule {
  ScheduleSpec spec;
  double peak = 0;
  LrSchedule() = default;
  LrSchedule(ScheduleSpec s, double peak_lr) : spec(s), peak(peak_lr) {}
  double lr(int64_t k) const;
};

}  // namespace flatline
