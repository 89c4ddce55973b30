// The GPT block and LayerNorm of `kernels: flatline` as autograd functions whose forward and backward
// passes are written out (as in karpathy/llm.c): ATen's matmuls (mm, bmm: MKL) with the fused kernels of
// sim/kernels.h between them, so that each elementwise chain is one pass over memory (docs/DESIGN.md §7).
// The same function as the module path of sim/models.cpp (`kernels: aten`: nn::LayerNorm, nn::Linear,
// baddbmm + softmax, at::gelu, autograd): pre-LayerNorm causal self-attention and a 4x tanh-GELU MLP,
//   x1 = x + proj(attention(ln_1(x))), out = x1 + mlp_proj(gelu(fc(ln_2(x1)))).
// Agrees with it to float rounding in the output and every gradient (tests/sim/gpt_block_test.cpp);
// not bit-identical (another order of operations, sim/kernels.h's exp). Same inputs, same bits, at any
// number of intra-op threads: rows go to threads in fixed blocks of kRowBlock, and the column sums of
// the bias, gain and shift gradients add per-block sums in block order.
// Tensors: float32, CPU, x (B, T, C) with T <= the weights' block and C % n_head == 0; weights as
// nn::Linear (out, in) and nn::LayerNorm (C) hold them. Throws c10::Error on another dtype or device.
#pragma once
#include "sim/torch_pch.h"

namespace flatline {

struct BlockWeights {
  at::Tensor ln1_w, ln1_b;      // ln_1 gain and shift (C)
  at::Tensor attn_w, attn_b;    // c_attn (3C, C), (3C): q, k, v
  at::Tensor proj_w, proj_b;    // attn_c_proj (C, C), (C)
  at::Tensor ln2_w, ln2_b;      // ln_2 (C)
  at::Tensor fc_w, fc_b;        // c_fc (4C, C), (4C)
  at::Tensor mlp_w, mlp_b;      // mlp_c_proj (C, 4C), (C)
};

// One block: (B, T, C) -> (B, T, C); `eps` is the LayerNorms' (nn::LayerNorm's default 1e-5).
at::Tensor fused_block(const at::Tensor& x, const BlockWeights& w, int64_t n_head, double eps);
// LayerNorm over the last dimension (the final ln_f): x (..., C), weight and bias (C).
at::Tensor fused_layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

}  // namespace flatline
