// GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2's gelu, PyTorch's gelu(approximate="tanh")):
//   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi)
// computed as x * sigmoid(2 k (x + 0.044715 x^3)) (the same function: 0.5 (1 + tanh(z)) = sigmoid(2z)),
// with its derivative in the backward, from ATen's vectorised sigmoid. Why not at::gelu: Debian's
// LibTorch 1.13 evaluates that tanh at 2.3 ns per element, forward and backward alike (its sigmoid:
// 0.4 ns); this one takes 1.2 (forward) and 1.3 (backward) ns per element on one thread, 0.7 and 0.8 on
// two (bench/README.md). Saves only x for the backward, as at::gelu does.
// Agrees with at::gelu(x, "tanh") to ~1e-6 in value and gradient (tests/sim/gelu_test.cpp).
// x: any shape, float32; returns a tensor of x's shape.
#pragma once
#include "sim/torch_pch.h"

namespace flatline {

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace flatline
