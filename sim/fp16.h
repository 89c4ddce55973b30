// fp16 (and bf16) emulation on CPU (Debian's LibTorch 1.13 has no CPU fp16 matmul). Values are rounded through
// IEEE binary16 (round-to-nearest-even; overflow -> inf, underflow -> 0 or subnormal) in the forward
// pass and, for their gradients, in the backward pass, at module boundaries. This reproduces what
// breaks a real fp16 run: activations or scaled gradients overflowing, small gradients flushing to 0.
#pragma once
#include "sim/torch_pch.h"

namespace flatline {

// Rounds x to `half` (at::kHalf or at::kBFloat16) and back in the forward pass, and its gradient the
// same way in the backward pass. If `inject_inf`, the backward gradient is replaced by +inf (a layer
// overflowing in fp16).
at::Tensor round_through(const at::Tensor& x, at::ScalarType half, bool inject_inf = false);
// The rounding alone, no autograd.
at::Tensor round_to(const at::Tensor& x, at::ScalarType half);

}  // namespace flatline
