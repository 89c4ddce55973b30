// fp16 emulation on CPU (Debian's LibTorch 1.13 has no CPU fp16 matmul). Values are rounded through
// IEEE binary16 (round-to-nearest-even; overflow -> inf, underflow -> 0 or subnormal) in the forward
// pass and, for their gradients, in the backward pass, at module boundaries. This reproduces what
// breaks a real fp16 run: activations or scaled gradients overflowing, small gradients flushing to 0.
#pragma once
#include "sim/torch_pch.h"

namespace flatline {

// Rounds x to binary16 and back (forward), and its gradient the same way (backward). If
// `inject_inf`, the backward gradient is replaced by +inf (a layer overflowing in fp16).
at::Tensor fp16_round(const at::Tensor& x, bool inject_inf = false);
// The rounding alone, no autograd.
at::Tensor to_fp16_and_back(const at::Tensor& x);

}  // namespace flatline
