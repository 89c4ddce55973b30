#include "sim/optimizer.h"

#include <Eigen/Core>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace flatline {
namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using ConstArr = Eigen::Map<const Eigen::ArrayXf>;

Arr arr(const at::Tensor& t) { return Arr(t.data_ptr<float>(), t.numel()); }
ConstArr carr(const at::Tensor& t) { return ConstArr(t.data_ptr<float>(), t.numel()); }

void require_float_contiguous(const at::Tensor& t, const std::string& what) {
  if (!t.defined() || t.scalar_type() != at::kFloat || !t.is_contiguous() || !t.device().is_cpu())
    throw std::invalid_argument(what + ": expected a contiguous float32 CPU tensor");
}

// Sum of squares and zero count in one pass, in GCC/Clang vector types (SSE2 on x86-64: four 4-lane
// accumulators, so that the adds' latency is hidden; compare-to-zero masks subtracted from 4-lane
// counters; Eigen's count() is scalar). Lanes are combined in a fixed order, so the result does not
// depend on the data's alignment.
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

struct SumSqZeros {
  float sum_sq;
  int64_t zeros;
};
SumSqZeros sum_sq_and_zeros(const float* p, int64_t n) {
  F4 acc[4] = {};
  int64_t zeros = 0;
  int64_t i = 0;
  while (i + 16 <= n) {
    I4 z[4] = {};  // -1 per zero; emptied every 2^24 elements, long before a lane could overflow
    const int64_t end = std::min(n - 15, i + (int64_t{1} << 24));
    for (; i < end; i += 16)
      for (int j = 0; j < 4; ++j) {
        F4 a;
        std::memcpy(&a, p + i + 4 * j, sizeof a);
        acc[j] += a * a;
        z[j] += a == 0.0f;
      }
    const I4 zs = (z[0] + z[1]) + (z[2] + z[3]);
    zeros -= int64_t{zs[0]} + zs[1] + zs[2] + zs[3];
  }
  float tail = 0;
  for (; i < n; ++i) {
    tail += p[i] * p[i];
    zeros += p[i] == 0.0f;
  }
  const F4 sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  return {((sum[0] + sum[1]) + (sum[2] + sum[3])) + tail, zeros};
}

}  // namespace

TensorStats tensor_stats(const std::vector<at::Tensor>& ts, bool full) {
  TensorStats s;
  for (size_t i = 0; i < ts.size(); ++i) {
    require_float_contiguous(ts[i], "tensor_stats: tensor " + std::to_string(i));
    ConstArr a = carr(ts[i]);
    s.numel += a.size();
    double sq;  // per tensor in float lanes, summed over tensors in double
    if (full) {
      const SumSqZeros one = sum_sq_and_zeros(a.data(), a.size());
      sq = one.sum_sq;
      s.zeros += one.zeros;
    } else {
      sq = a.matrix().squaredNorm();
    }
    // A non-finite sum means inf or nan in the tensor, or finite values whose squares overflow float
    // (|g| above ~1.8e19: a gradient still multiplied by a large loss scale). Only then, rarely, is each
    // element checked, and a finite tensor summed again in double.
    if (!std::isfinite(sq)) {
      if (a.isFinite().all()) sq = a.cast<double>().square().sum();
      else s.finite = false;
    }
    s.sum_sq += sq;
  }
  return s;
}

at::Tensor sum_sq_on_device(const std::vector<at::Tensor>& ts) {
  return at::stack(at::_foreach_norm(ts)).to(at::kDouble).square().sum();
}

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<at::Tensor> params, bool aten)
    : spec_(spec), aten_(aten), params_(std::move(params)) {
  if (spec_.kind != "adamw" && spec_.kind != "sgd")
    throw std::invalid_argument("optimizer: unknown kind '" + spec_.kind + "' (adamw | sgd)");
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (aten_) {
      if (!p.defined() || p.scalar_type() != at::kFloat || !p.is_contiguous())
        throw std::invalid_argument("optimizer: parameter " + std::to_string(i) + ": expected a contiguous float32 tensor");
    } else {
      require_float_contiguous(p, "optimizer: parameter " + std::to_string(i));
    }
    m_.push_back(at::zeros_like(p));
    if (spec_.kind == "adamw") v_.push_back(at::zeros_like(p));
    if (aten_) prev_.push_back(at::empty_like(p));
  }
  if (aten_ && !params_.empty()) step_t_ = at::zeros({}, params_[0].options());
}

UpdateNorms Optimizer::step_aten(double lr, bool norms) {
  std::vector<at::Tensor> grads;
  for (auto& p : params_) grads.push_back(p.grad());
  ++steps_;
  if (norms) at::_foreach_copy_(prev_, params_);
  if (spec_.kind == "adamw") {
    step_t_.fill_(static_cast<double>(steps_));  // torch.optim.AdamW's state["step"], one for every tensor
    const std::vector<at::Tensor> steps(params_.size(), step_t_);
    at::_fused_adamw_(params_, grads, m_, v_, /*max_exp_avg_sqs=*/{}, steps, lr, spec_.beta1, spec_.beta2,
                      spec_.weight_decay, spec_.eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    // torch.optim.SGD(fused=True): no momentum buffers without momentum; the first step's buffer is d_p
    const std::vector<at::Tensor> none;
    at::_fused_sgd_(params_, grads, spec_.momentum > 0 ? at::TensorList(m_) : at::TensorList(none),
                    spec_.weight_decay, spec_.momentum, lr, /*dampening=*/0, /*nesterov=*/false, /*maximize=*/false,
                    /*is_first_step=*/spec_.momentum > 0 && steps_ == 1);
  }
  UpdateNorms out;
  if (norms) {
    at::_foreach_sub_(prev_, params_);
    out.sq = at::stack({sum_sq_on_device(prev_), sum_sq_on_device(params_)});
  }
  return out;
}

UpdateNorms Optimizer::step(double lr, double grad_mult, bool norms) {
  for (size_t i = 0; i < params_.size(); ++i) {  // all checked before anything changes
    const at::Tensor& grad = params_[i].grad();
    if (!grad.defined()) throw std::invalid_argument("optimizer: parameter " + std::to_string(i) + " has no gradient");
    if (aten_) {
      if (grad.scalar_type() != at::kFloat || grad.device() != params_[i].device())
        throw std::invalid_argument("optimizer: gradient of parameter " + std::to_string(i) +
                                    ": expected float32 on the parameter's device");
    } else {
      require_float_contiguous(grad, "optimizer: gradient of parameter " + std::to_string(i));
    }
  }
  if (aten_) {
    if (grad_mult != 1.0) throw std::invalid_argument("optimizer: the aten kernels take unscaled, clipped gradients");
    return step_aten(lr, norms);
  }
  UpdateNorms out;
  ++steps_;
  const auto gm = static_cast<float>(grad_mult);
  Eigen::ArrayXf next;  // the new parameter values, so that the update actually applied can be summed
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& grad = params_[i].grad();
    Arr p = arr(params_[i]), m = arr(m_[i]);
    ConstArr g0 = carr(grad);
    const auto g = g0 * gm;
    if (spec_.kind == "adamw") {
      Arr v = arr(v_[i]);
      const double bc1 = 1 - std::pow(spec_.beta1, static_cast<double>(steps_));
      const double bc2 = 1 - std::pow(spec_.beta2, static_cast<double>(steps_));
      const auto b1 = static_cast<float>(spec_.beta1), b2 = static_cast<float>(spec_.beta2);
      const auto decay = static_cast<float>(1 - lr * spec_.weight_decay);
      const auto step_size = static_cast<float>(lr / bc1), bc2_sqrt = static_cast<float>(std::sqrt(bc2));
      const auto eps = static_cast<float>(spec_.eps);
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      next = decay * p - step_size * (m / ((v.sqrt() / bc2_sqrt) + eps));
    } else {
      const auto wd = static_cast<float>(spec_.weight_decay), mom = static_cast<float>(spec_.momentum);
      const auto lrf = static_cast<float>(lr);
      if (mom == 0) {
        next = p - lrf * (g + wd * p);
      } else {
        if (steps_ == 1) m = g + wd * p;
        else m = mom * m + (g + wd * p);
        next = p - lrf * m;
      }
    }
    if (norms) {
      out.update_sq += (next - p).matrix().squaredNorm();
      out.param_sq += next.matrix().squaredNorm();
    }
    p = next;
  }
  return out;
}

void Optimizer::save(torch::serialize::OutputArchive& ar) const {
  ar.write("kind", c10::IValue(spec_.kind));
  ar.write("tensors", at::tensor({static_cast<int64_t>(params_.size())}, at::kLong));
  ar.write("step", at::tensor({steps_}, at::kLong));
  // CPU copies: a checkpoint written on one device resumes on another
  for (size_t i = 0; i < m_.size(); ++i) ar.write("m." + std::to_string(i), m_[i].cpu());
  for (size_t i = 0; i < v_.size(); ++i) ar.write("v." + std::to_string(i), v_[i].cpu());
}

void Optimizer::load(torch::serialize::InputArchive& ar) {
  c10::IValue kind;
  at::Tensor count;
  if (!ar.try_read("kind", kind) || !kind.isString() || !ar.try_read("tensors", count))
    throw std::runtime_error("optimizer state: not written by this optimizer (no kind / tensor count)");
  if (kind.toStringRef() != spec_.kind)
    throw std::runtime_error("optimizer state is for '" + kind.toStringRef() + "', this run's optimizer is '" +
                             spec_.kind + "'");
  if (count.item<int64_t>() != static_cast<int64_t>(params_.size()))
    throw std::runtime_error("optimizer state holds " + std::to_string(count.item<int64_t>()) +
                             " parameter tensors, this model has " + std::to_string(params_.size()));
  at::Tensor step;
  ar.read("step", step);
  std::vector<std::pair<at::Tensor*, at::Tensor>> loaded;  // read and checked first, then copied
  auto read_into = [&](const std::string& name, at::Tensor& dst) {
    at::Tensor t;
    ar.read(name, t);
    if (!t.sizes().equals(dst.sizes()) || t.scalar_type() != dst.scalar_type())
      throw std::runtime_error("optimizer state '" + name + "' does not match the model's parameter");
    loaded.emplace_back(&dst, t);
  };
  for (size_t i = 0; i < m_.size(); ++i) read_into("m." + std::to_string(i), m_[i]);
  for (size_t i = 0; i < v_.size(); ++i) read_into("v." + std::to_string(i), v_[i]);
  for (auto& [dst, t] : loaded) dst->copy_(t);
  steps_ = step.item<int64_t>();
}

}  // namespace flatline
