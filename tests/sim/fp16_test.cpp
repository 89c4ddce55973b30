// fp16/bf16 emulation: exact rounding, overflow to inf, underflow to 0, in both passes.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/fp16.h"
#include "sim/torch_pch.h"

namespace flatline {

TEST(Fp16, RoundsLikeIeeeBinary16) {
  at::Tensor x = at::tensor({1.0f / 3.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, -70000.0f}, at::kFloat);
  at::Tensor y = round_to(x, at::kHalf);
  EXPECT_EQ(y[0].item<float>(), 0.333251953125f);        // nearest binary16 to 1/3
  EXPECT_EQ(y[1].item<float>(), 65504.0f);               // largest finite
  EXPECT_TRUE(std::isinf(y[2].item<float>()));           // rounds past the largest: overflow
  EXPECT_EQ(y[3].item<float>(), 0.0f);                   // below half the smallest subnormal: underflow
  EXPECT_EQ(y[4].item<float>(), 5.9604644775390625e-08f);  // the smallest subnormal, 2^-24
  EXPECT_TRUE(std::isinf(y[5].item<float>()) && y[5].item<float>() < 0);
}

TEST(Fp16, Bf16KeepsRangeButLosesPrecision) {
  at::Tensor y = round_to(at::tensor({65520.0f, 1.0f / 3.0f}, at::kFloat), at::kBFloat16);
  EXPECT_EQ(y[0].item<float>(), 65536.0f);
  EXPECT_EQ(y[1].item<float>(), 0.333984375f);
}

TEST(Fp16, GradientsAreRoundedInTheBackwardAndInfCanBeInjected) {
  at::Tensor x = at::tensor({1.0f, 2.0f}, at::kFloat).requires_grad_(true);
  (round_through(x, at::kHalf) * 1e-8).sum().backward();
  EXPECT_EQ(x.grad()[0].item<float>(), 0.0f);  // a 1e-8 gradient underflows in fp16
  at::Tensor z = at::tensor({1.0f}, at::kFloat).requires_grad_(true);
  round_through(z, at::kHalf, /*inject_inf=*/true).sum().backward();
  EXPECT_TRUE(std::isinf(z.grad()[0].item<float>()));
}

}  // namespace flatline
