// Real mixed precision on CPU (LibTorch 2.x runs autocast and GradScaler's kernels there): the
// harness's LossScaler and the real _amp_update_scale_ agree step by step on an overflow sequence,
// unscale_ finds exactly the non-finite gradients, and autocast changes the dtype of a matmul.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sim/amp.h"
#include "run/loss_scaler.h"
#include "sim/optimizer.h"
#include "sim/torch_pch.h"

namespace flatline {

// found_inf per step, as the scenarios produce it: a clean stretch that grows the scale (interval 3),
// the overflow_streak fault (six overflows in a row), recovery, a single overflow, clean to the end.
std::vector<bool> recorded_overflows() {
  std::vector<bool> v;
  for (int i = 0; i < 7; ++i) v.push_back(false);
  for (int i = 0; i < 6; ++i) v.push_back(true);
  for (int i = 0; i < 5; ++i) v.push_back(false);
  v.push_back(true);
  for (int i = 0; i < 4; ++i) v.push_back(false);
  return v;
}

TEST(GradScalerKernels, AgreeWithLossScalerStepByStep) {
  LossScaler ours;
  ours.scale = 1024;
  ours.growth_interval = 3;
  GradScaler real(ours, at::kCPU);
  const auto seq = recorded_overflows();
  std::vector<double> expected_scale = {1024, 1024, 2048, 2048, 2048, 4096, 4096, 2048, 1024, 512, 256, 128,
                                        64,   64,   64,   128,  128,  128, 64,   64,   64,   128,  128};
  ASSERT_EQ(expected_scale.size(), seq.size());
  for (size_t i = 0; i < seq.size(); ++i) {
    // the gradients of this step, scaled: an inf where the sequence overflowed
    at::Tensor g = at::full({8}, 0.5f * static_cast<float>(real.scale().item<double>()));
    if (seq[i]) g[3] = std::numeric_limits<float>::infinity();
    const at::Tensor found = real.unscale_({g});
    EXPECT_EQ(found.item<float>() != 0, seq[i]) << "step " << i;
    if (!seq[i]) EXPECT_EQ(g[0].item<float>(), 0.5f) << "step " << i;  // unscaled exactly
    const bool skip = ours.update(seq[i]);
    real.update(found, std::numeric_limits<double>::infinity());
    EXPECT_EQ(skip, seq[i]);
    const LossScaler r = real.state();
    EXPECT_EQ(r.scale, ours.scale) << "step " << i;
    EXPECT_EQ(r.growth_tracker, ours.growth_tracker) << "step " << i;
    EXPECT_EQ(ours.scale, expected_scale[i]) << "step " << i;
  }
}

TEST(GradScalerKernels, ClampAndDisabled) {
  LossScaler s;
  s.growth_interval = 1;
  GradScaler real(s, at::kCPU);
  at::Tensor g = at::ones({4});
  real.update(real.unscale_({g}), 1.0 / 256);  // would grow to 2^17; the clamp holds it at 2^-8
  EXPECT_EQ(real.state().scale, 1.0 / 256);
  LossScaler off;
  off.enabled = false;
  GradScaler none(off, at::kCPU);
  EXPECT_EQ(none.scale().item<float>(), 1.0f);
  at::Tensor h = at::tensor({2.0f, std::nanf("")});
  EXPECT_EQ(none.unscale_({h}).item<float>(), 1.0f);  // the check still runs
  EXPECT_EQ(h[0].item<float>(), 2.0f);                 // nothing unscaled
  none.update(at::ones({1}), 1e9);
  EXPECT_EQ(none.scale().item<float>(), 1.0f);
}

TEST(Autocast, GuardCastsMatmulsAndRestores) {
  at::Tensor a = at::randn({4, 4}), b = at::randn({4, 4});
  {
    AutocastGuard g(at::kCPU, at::kBFloat16, true);
    EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kBFloat16);
    {
      AutocastGuard h(at::kCPU, at::kHalf, true);
      EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kHalf);
    }
    EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
  AutocastGuard off(at::kCPU, at::kHalf, false);
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
}

// The aten optimizer (ATen's fused kernels) and the harness's fused Eigen one: the same update to
// float rounding, norms included.
TEST(AtenOptimizer, MatchesTheFlatlineKernels) {
  for (const char* kind : {"adamw", "sgd"}) {
    OptimizerSpec spec;
    spec.kind = kind;
    spec.lr = 0.01;
    spec.momentum = std::string(kind) == "sgd" ? 0.9 : 0.0;
    spec.weight_decay = 0.05;
    at::manual_seed(3);
    std::vector<at::Tensor> a = {at::randn({5, 3}), at::randn({7})}, b;
    for (auto& t : a) b.push_back(t.clone());
    Optimizer ours(spec, a), real(spec, b, /*aten=*/true);
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        at::Tensor g = at::randn(a[i].sizes());
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      const UpdateNorms n1 = ours.step(spec.lr), n2 = real.step(spec.lr);
      ASSERT_TRUE(n2.sq.defined());
      EXPECT_NEAR(n2.sq[0].item<double>(), n1.update_sq, 1e-5 * n1.update_sq) << kind;
      EXPECT_NEAR(n2.sq[1].item<double>(), n1.param_sq, 1e-5 * n1.param_sq) << kind;
      for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::allclose(a[i], b[i], 1e-5, 1e-6)) << kind << " step " << step;
    }
  }
}

}  // namespace flatline
