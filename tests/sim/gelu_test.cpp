// gelu_tanh against at::gelu(x, "tanh"): values and gradients, at sizes below and above one task.
#include <gtest/gtest.h>

#include <limits>

#include "sim/gelu.h"
#include "sim/torch_pch.h"

namespace flatline {

TEST(GeluTanh, MatchesATenInValueAndGradient) {
  for (int64_t n : {7, 40000}) {  // one task; several tasks over the intra-op threads
    at::manual_seed(3);
    at::Tensor x = at::linspace(-12, 12, n).requires_grad_(true);
    at::Tensor ref_x = x.detach().to(at::kDouble).requires_grad_(true), aten_x = x.detach().clone().requires_grad_(true);
    at::Tensor g = at::randn({n});
    at::Tensor y = gelu_tanh(x), ref = at::gelu(ref_x, "tanh"), aten = at::gelu(aten_x, "tanh");
    y.backward(g);
    ref.backward(g.to(at::kDouble));
    aten.backward(g);
    // error relative to the value's magnitude
    auto rel = [](const at::Tensor& a, const at::Tensor& b) { return ((a - b).abs() / (1 + b.abs())).max().item<double>(); };
    // against float64 (measured at n = 40000: value 9e-8, gradient 1.4e-6; ATen's own float32 kernel
    // 1.5e-7 and 2.8e-6), and against ATen's float32 kernel
    EXPECT_LT(rel(y, ref), 2e-7) << n;
    EXPECT_LT(rel(x.grad(), ref_x.grad()), 2e-6) << n;
    EXPECT_LT(rel(y, aten), 3e-7) << n;
    EXPECT_LT(rel(x.grad(), aten_x.grad()), 5e-6) << n;
    EXPECT_GT(rel(x.grad(), at::zeros_like(ref_x.grad())), 0.5);  // real gradients, not zeros
  }
}

TEST(GeluTanh, KnownValuesAndShape) {
  at::Tensor x = at::tensor({0.0f, 1.0f, -1.0f, -12.0f, 20.0f}).view({5, 1});
  at::Tensor y = gelu_tanh(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_EQ(y[0].item<float>(), 0.0f);
  EXPECT_NEAR(y[1].item<float>(), 0.841192f, 1e-6);   // 0.5 (1 + tanh(sqrt(2/pi) 1.044715))
  EXPECT_NEAR(y[2].item<float>(), -0.158808f, 1e-6);
  EXPECT_NEAR(y[3].item<float>(), 0.0f, 1e-30);
  EXPECT_EQ(y[4].item<float>(), 20.0f);
  at::Tensor inf = gelu_tanh(at::tensor({std::numeric_limits<float>::infinity()}));
  EXPECT_TRUE(std::isinf(inf[0].item<float>()));
  // far tails: the gradient is exactly 1 or 0, as at::gelu's, not 0 * inf = nan
  at::Tensor far = at::tensor({2e13f, -2e13f, 3e38f, -1e5f}).requires_grad_(true);
  gelu_tanh(far).sum().backward();
  at::Tensor ref = far.detach().clone().requires_grad_(true);
  at::gelu(ref, "tanh").sum().backward();
  for (int i : {0, 1, 3}) EXPECT_EQ(far.grad()[i].item<float>(), ref.grad()[i].item<float>()) << i;
  EXPECT_EQ(far.grad()[0].item<float>(), 1.0f);
  EXPECT_EQ(far.grad()[1].item<float>(), 0.0f);
  EXPECT_EQ(far.grad()[2].item<float>(), 1.0f);  // at::gelu's own backward gives nan at 3e38
  EXPECT_THROW(gelu_tanh(at::zeros({2}, at::kDouble)), c10::Error);
}

}  // namespace flatline
