// Metric names -> Record fields, shared by the readers of name/value formats (HF trainer_state.json,
// Lightning and W&B CSV, TensorBoard tags). Names are matched after lower-casing, '-' and ' ' -> '_'
// and dropping a "train/", "train_", "trainer/" or "training/" prefix, so that the names the common
// loggers write all land on the same field:
//   loss        loss, train/loss, train_loss, train_loss_step, lm loss (Megatron TB), lm_loss, training_loss
//   lr          lr, learning_rate, learning-rate (Megatron TB), lr-<Optimizer>[/pg1] (Lightning LearningRateMonitor)
//   grad_norm   grad_norm, grad-norm (Megatron TB), gradient_norm, grad_2.0_norm_total (Lightning)
//   loss_scale  loss_scale, loss-scale (Megatron TB), scaler/scale, grad_scale
//   param_norm  param_norm, params_norm, params-norm (Megatron TB)
//   epoch       epoch (a float epoch is floored)
//   step        step, global_step, train/global_step (HF via W&B), trainer/global_step
//   eval_loss   eval_loss, eval/loss, val_loss, val/loss, validation_loss, valid/loss, lm loss validation
//   skipped     skipped, skipped_step(s)       overflow  overflow, found_inf
//   local_grad_norm  local_grad_norm (a rank's norm before the all-reduce)   update_norm  update_norm
//   grad_zero_frac   grad_zero_frac, grad_zeros_frac, zero_grad_frac
//   and a multi-task model's named losses: train_<name>_loss is a loss, val_/valid_/validation_/eval_<name>_loss
//   an eval loss (the first column of each kind in a table wins)
// Anything else (epoch aggregates like train_loss_epoch, throughput, memory) is ignored.
#pragma once
#include <string>
#include <string_view>

#include "telemetry/record.h"

namespace flatline::readers {

enum class Metric {
  none, loss, lr, grad_norm, loss_scale, param_norm, epoch, step, eval_loss, skipped, overflow, local_grad_norm,
  update_norm, grad_zero_frac
};

Metric metric_for(std::string_view name);

// Sets the field of `r` that `m` names to v, unless it is already set (the first name wins).
// Returns false for Metric::none, step and eval_loss (the caller places those).
bool set_metric(Record& r, Metric m, double v);

}  // namespace flatline::readers
