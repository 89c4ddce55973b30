// Metric name table of readers/metric_names.h.
#include "readers/metric_names.h"

#include <cctype>
#include <cmath>

namespace flatline::readers {

Metric metric_for(std::string_view name) {
  std::string n;
  n.reserve(name.size());
  for (unsigned char c : name) n += (c == '-' || c == ' ') ? '_' : static_cast<char>(std::tolower(c));
  bool train_prefix = false;
  for (const char* p : {"train/", "trainer/", "training/", "train_"})
    if (n.rfind(p, 0) == 0 && n.size() > std::string(p).size()) {
      n = n.substr(std::string(p).size());
      train_prefix = true;
      break;
    }
  auto ends_loss = [](const std::string& x) { return x.size() > 5 && x.compare(x.size() - 5, 5, "_loss") == 0; };
  if (n == "loss" || n == "loss_step" || n == "lm_loss" || n == "training_loss") return Metric::loss;
  if (n == "lr" || n == "learning_rate" || n == "optimizer/lr") return Metric::lr;
  if (n.rfind("lr_", 0) == 0) {  // Lightning's LearningRateMonitor: lr-AdamW, lr-SGD/pg1 (first group only)
    auto slash = n.find('/');
    return slash == std::string::npos || n.substr(slash) == "/pg1" ? Metric::lr : Metric::none;
  }
  if (n == "grad_norm" || n == "gradient_norm" || n == "grad_2.0_norm_total") return Metric::grad_norm;
  if (n == "loss_scale" || n == "scaler/scale" || n == "grad_scale") return Metric::loss_scale;
  if (n == "param_norm" || n == "params_norm") return Metric::param_norm;
  if (n == "epoch") return Metric::epoch;
  if (n == "step" || n == "global_step") return Metric::step;
  if (n == "eval_loss" || n == "eval/loss" || n == "val_loss" || n == "val/loss" || n == "validation_loss" ||
      n == "validation/loss" || n == "valid/loss" || n == "lm_loss_validation")
    return Metric::eval_loss;
  if (n == "skipped" || n == "skipped_step" || n == "skipped_steps") return Metric::skipped;
  if (n == "overflow" || n == "found_inf") return Metric::overflow;
  if (n == "local_grad_norm") return Metric::local_grad_norm;
  if (n == "update_norm") return Metric::update_norm;
  if (n == "grad_zero_frac" || n == "grad_zeros_frac" || n == "zero_grad_frac") return Metric::grad_zero_frac;
  // A named loss of a multi-task model (train_classification_loss, val_regression_loss): the training one
  // is a loss, the held-out one an eval loss (the first such column of a table wins, as any name does).
  if (train_prefix && ends_loss(n)) return Metric::loss;
  for (const char* p : {"val_", "valid_", "validation_", "eval_", "val/", "eval/"})
    if (n.rfind(p, 0) == 0 && ends_loss(n.substr(std::string(p).size() - 1))) return Metric::eval_loss;
  return Metric::none;
}

namespace {
void set_once(std::optional<double>& f, double v) {
  if (!f) f = v;
}
}  // namespace

bool set_metric(Record& r, Metric m, double v) {
  switch (m) {
    case Metric::loss: set_once(r.loss, v); return true;
    case Metric::lr: set_once(r.lr, v); return true;
    case Metric::grad_norm: set_once(r.grad_norm, v); return true;
    case Metric::loss_scale: set_once(r.loss_scale, v); return true;
    case Metric::param_norm: set_once(r.param_norm, v); return true;
    case Metric::local_grad_norm: set_once(r.local_grad_norm, v); return true;
    case Metric::update_norm: set_once(r.update_norm, v); return true;
    case Metric::grad_zero_frac: set_once(r.grad_zero_frac, v); return true;
    case Metric::epoch:
      if (!r.epoch && std::isfinite(v) && std::fabs(v) < 9e15) r.epoch = static_cast<int64_t>(std::floor(v));
      return true;
    case Metric::skipped:
      if (!r.skipped && !std::isnan(v)) r.skipped = v != 0;
      return true;
    case Metric::overflow:
      if (!r.overflow && !std::isnan(v)) r.overflow = v != 0;
      return true;
    case Metric::none:
    case Metric::step:
    case Metric::eval_loss: return false;
  }
  return false;
}

}  // namespace flatline::readers
