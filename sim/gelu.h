// GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2's gelu, PyTorch's gelu(approximate="tanh")),
// as one autograd function on the CPU kernels of sim/kernels.h (the formula and its derivative are
// there): one pass over memory forward and one backward, where the ATen formulation it replaces,
// x * sigmoid(2k (x + 0.044715 x^3)) with its derivative written out, took 4 ops forward and 8 backward.
// The GPT block of `kernels: flatline` runs the same kernels fused with c_fc's bias (sim/gpt_block.h);
// this one is GELU alone. Saves only x for the backward, as at::gelu does.
// Agrees with at::gelu(x, "tanh") to ~1e-7 in value and ~1e-6 in gradient (tests/sim/gelu_test.cpp).
// x: any shape, float32 on the CPU (else c10::Error); returns a contiguous tensor of x's shape.
#pragma once
#include "sim/torch_pch.h"

namespace flatline {

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace flatline
