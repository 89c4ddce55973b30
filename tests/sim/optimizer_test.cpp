// The fused optimizers against torch::optim (the definition they follow), their norms against ATen,
// checkpoint round trips, and the one-pass gradient statistics.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cmath>
#include <limits>

#include "sim/optimizer.h"
#include "sim/torch_pch.h"

namespace flatline {
namespace {

std::vector<at::Tensor> make_params(int64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> ps;
  for (auto shape : std::vector<std::vector<int64_t>>{{64, 32}, {32}, {7}, {3, 5, 9}})
    ps.push_back((at::randn(shape) * 0.3).requires_grad_(true));
  return ps;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

void set_grads(std::vector<at::Tensor>& ps, int step, double mult = 1.0) {
  at::manual_seed(1000 + step);
  for (auto& p : ps) p.mutable_grad() = at::randn(p.sizes()) * mult;
}

double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i].detach() - b[i].detach()).abs().max().item<double>());
  return d;
}

// lr changes every step, as under a schedule; 20 steps cover the bias-correction transient.
TEST(Optimizer, AdamWMatchesTorchOptimAdamW) {
  OptimizerSpec spec;  // adamw, betas 0.9/0.95, eps 1e-8, weight decay 0.1
  auto ours = make_params(1), ref = clones(ours), start = clones(ours);
  Optimizer opt(spec, ours);
  torch::optim::AdamW torch_opt(ref, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  for (int s = 1; s <= 20; ++s) {
    const double lr = 1e-2 * (1.0 - 0.04 * s);
    set_grads(ours, s);
    set_grads(ref, s);
    opt.step(lr);
    for (auto& g : torch_opt.param_groups()) g.options().set_lr(lr);
    torch_opt.step();
  }
  EXPECT_LT(max_abs_diff(ours, ref), 2e-6);
  EXPECT_GT(max_abs_diff(ours, start), 0.05);  // the parameters moved far more than the tolerance
  EXPECT_EQ(opt.steps(), 20);
}

TEST(Optimizer, SgdWithAndWithoutMomentumMatchesTorchOptimSgd) {
  for (double momentum : {0.0, 0.9}) {
    OptimizerSpec spec;
    spec.kind = "sgd";
    spec.momentum = momentum;
    spec.weight_decay = 0.01;
    auto ours = make_params(2), ref = clones(ours), start = clones(ours);
    Optimizer opt(spec, ours);
    torch::optim::SGD torch_opt(ref, torch::optim::SGDOptions(0.05).momentum(momentum).weight_decay(0.01));
    for (int s = 1; s <= 10; ++s) {
      set_grads(ours, s);
      set_grads(ref, s);
      opt.step(0.05);
      torch_opt.step();
    }
    EXPECT_LT(max_abs_diff(ours, ref), 1e-6) << "momentum " << momentum;
    EXPECT_GT(max_abs_diff(ours, start), 0.1) << "momentum " << momentum;
  }
}

// grad_mult (unscale x clip coefficient) is the same as multiplying the gradients first.
TEST(Optimizer, GradMultiplierEqualsScalingTheGradients) {
  OptimizerSpec spec;
  auto a = make_params(3), b = clones(a);
  Optimizer oa(spec, a), ob(spec, b);
  for (int s = 1; s <= 5; ++s) {
    set_grads(a, s, 65536.0);
    set_grads(b, s, 0.37);
    oa.step(1e-3, 0.37 / 65536.0);
    ob.step(1e-3);
  }
  EXPECT_LT(max_abs_diff(a, b), 1e-7);
}

TEST(Optimizer, NormsAreTheUpdateAppliedAndTheNewParameters) {
  auto ps = make_params(4);
  Optimizer opt(OptimizerSpec{}, ps);
  set_grads(ps, 1);
  opt.step(1e-2);  // past the first step, whose Adam update is sign-like
  auto before = clones(ps);
  set_grads(ps, 2);
  const UpdateNorms n = opt.step(1e-2);
  double upd = 0, par = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    upd += (ps[i].detach() - before[i].detach()).pow(2).sum().item<double>();
    par += ps[i].detach().pow(2).sum().item<double>();
  }
  EXPECT_NEAR(n.update_sq, upd, 1e-5 * upd);
  EXPECT_NEAR(n.param_sq, par, 1e-5 * par);
  EXPECT_GT(upd, 1e-4);
  const UpdateNorms none = opt.step(1e-2, 1.0, /*norms=*/false);
  EXPECT_EQ(none.update_sq, 0.0);
  EXPECT_EQ(none.param_sq, 0.0);
}

TEST(Optimizer, SaveAndLoadContinueBitIdentically) {
  for (const char* kind : {"adamw", "sgd"}) {
    OptimizerSpec spec;
    spec.kind = kind;
    spec.momentum = 0.9;
    auto straight = make_params(5), resumed = clones(straight);
    Optimizer a(spec, straight);
    {
      Optimizer first(spec, resumed);
      for (int s = 1; s <= 3; ++s) {
        set_grads(straight, s);
        a.step(1e-2);
        set_grads(resumed, s);
        first.step(1e-2);
      }
      torch::serialize::OutputArchive out;
      first.save(out);
      std::stringstream buf;
      out.save_to(buf);
      Optimizer second(spec, resumed);  // fresh state, then the saved one
      torch::serialize::InputArchive in;
      in.load_from(buf);
      second.load(in);
      EXPECT_EQ(second.steps(), 3);
      for (int s = 4; s <= 6; ++s) {
        set_grads(straight, s);
        a.step(1e-2);
        set_grads(resumed, s);
        second.step(1e-2);
      }
    }
    EXPECT_EQ(max_abs_diff(straight, resumed), 0.0) << kind;
  }
}

TEST(Optimizer, LoadRefusesStateOfAnotherKindOrSize) {
  auto ps = make_params(6);
  OptimizerSpec adamw, sgd;
  sgd.kind = "sgd";
  sgd.momentum = 0.9;
  Optimizer a(adamw, ps);
  set_grads(ps, 1);
  a.step(1e-2);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::stringstream buf;
  out.save_to(buf);
  auto expect_refused = [&](Optimizer& o, const std::string& what) {
    torch::serialize::InputArchive in;
    buf.seekg(0);
    in.load_from(buf);
    try {
      o.load(in);
      FAIL() << "accepted: " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(e.what(), what);
    }
    EXPECT_EQ(o.steps(), 0);
  };
  Optimizer other_kind(sgd, clones(ps));
  expect_refused(other_kind, "optimizer state is for 'adamw', this run's optimizer is 'sgd'");
  auto fewer = clones(ps);
  fewer.pop_back();
  Optimizer other_size(adamw, fewer);
  expect_refused(other_size, "optimizer state holds 4 parameter tensors, this model has 3");
}

TEST(Optimizer, RejectsWhatItCannotUpdate) {
  at::Tensor t = at::randn({4, 6}).t().requires_grad_(true);  // a non-contiguous view
  try {
    Optimizer opt(OptimizerSpec{}, {at::zeros({3}, at::kFloat), t});
    FAIL() << "accepted a non-contiguous parameter";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "optimizer: parameter 1: expected a contiguous float32 CPU tensor");
  }
  OptimizerSpec bad;
  bad.kind = "lamb";
  EXPECT_THROW(Optimizer(bad, {at::zeros({3})}), std::invalid_argument);
  Optimizer opt(OptimizerSpec{}, {at::zeros({3}).requires_grad_(true)});
  EXPECT_THROW(opt.step(1e-3), std::invalid_argument);  // no gradient yet
  EXPECT_EQ(opt.steps(), 0);                             // a refused step is not counted
  std::vector<at::Tensor> two = {at::ones({3}).requires_grad_(true), at::ones({4, 2}).requires_grad_(true)};
  two[0].mutable_grad() = at::ones({3});
  two[1].mutable_grad() = at::ones({2, 4}).t();  // a non-contiguous gradient on the second tensor
  Optimizer partial(OptimizerSpec{}, two);
  EXPECT_THROW(partial.step(1e-3), std::invalid_argument);
  EXPECT_EQ(two[0].detach().sum().item<float>(), 3.0f);  // the first tensor was not updated either
}

TEST(TensorStats, SumOfSquaresZerosAndFiniteness) {
  TensorStats s = tensor_stats({at::tensor({3.0f, 0.0f, -4.0f}), at::tensor({0.0f, 12.0f})});
  EXPECT_DOUBLE_EQ(s.sum_sq, 169.0);
  EXPECT_EQ(s.zeros, 2);
  EXPECT_EQ(s.numel, 5);
  EXPECT_TRUE(s.finite);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(tensor_stats({at::tensor({1.0f}), at::tensor({2.0f, -inf})}).finite);
  EXPECT_FALSE(tensor_stats({at::tensor({nan, 0.0f})}).finite);
  for (bool full : {true, false}) {  // finite, but its square overflows float: summed again in double
    TensorStats big = tensor_stats({at::tensor({3e20f, 1.0f}), at::tensor({2.0f})}, full);
    EXPECT_TRUE(big.finite);
    EXPECT_DOUBLE_EQ(big.sum_sq, static_cast<double>(3e20f) * static_cast<double>(3e20f) + 1.0 + 4.0);
  }
  EXPECT_FALSE(tensor_stats({at::tensor({-inf, 1.0f})}, /*full=*/false).finite);
  // long enough for the vector lanes and a tail: every 7th element zero, the rest 0.5 or -0.25
  std::vector<float> v(1003);
  double want_sq = 0;
  int64_t want_zeros = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = i % 7 == 0 ? 0.0f : (i % 2 ? 0.5f : -0.25f);
    want_sq += static_cast<double>(v[i]) * v[i];
    want_zeros += v[i] == 0.0f;
  }
  TensorStats lanes = tensor_stats({at::from_blob(v.data(), {1003}, at::kFloat), at::from_blob(v.data() + 1, {1000}, at::kFloat)});
  double want_sq2 = 0;
  for (size_t i = 1; i < 1001; ++i) want_sq2 += static_cast<double>(v[i]) * v[i];
  int64_t want_zeros2 = 0;
  for (size_t i = 1; i < 1001; ++i) want_zeros2 += v[i] == 0.0f;
  EXPECT_NEAR(lanes.sum_sq, want_sq + want_sq2, 1e-4);
  EXPECT_EQ(lanes.zeros, want_zeros + want_zeros2);  // 144 + 143
  EXPECT_EQ(lanes.numel, 2003);
  EXPECT_DOUBLE_EQ(tensor_stats({at::from_blob(v.data(), {1003}, at::kFloat)}, false).sum_sq,
                   tensor_stats({at::from_blob(v.data(), {1003}, at::kFloat)}).sum_sq);
  TensorStats lite = tensor_stats({at::tensor({0.0f, 2.0f})}, /*full=*/false);
  EXPECT_DOUBLE_EQ(lite.sum_sq, 4.0);
  EXPECT_EQ(lite.zeros, 0);  // not counted when not asked for
}

}  // namespace
}  // namespace flatline
