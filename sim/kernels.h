// The fused CPU kernels of `kernels: flatline` (docs/DESIGN.md §7): the elementwise and row-wise work
// of a GPT block that TorchInductor fuses into generated C++ loops (the GELU chain with its bias add,
// LayerNorm with the residual add before it, the causal softmax with its scale and mask, the head
// split and merge with the attention bias, and the bias gradients), forward and backward, one pass over
// memory each. The matmuls stay ATen's (MKL); sim/gpt_block.cpp strings the two together.
//
// Loops over float32 rows in GCC vector types (no torch, no intrinsics): rows are contiguous, `cols`
// values each; a kernel works on the rows it is given, so callers split rows over threads. Numerics,
// the same on every machine:
//  - each compiled three times (x86-64-v4: AVX-512, v3: AVX2, baseline: SSE2), the best the CPU runs
//    chosen at first use; 8 floats at a time in every variant, floating-point contraction off (no FMA),
//    reductions in 8 fixed lanes combined in a fixed tree: every variant gives the same bits (tested;
//    the baseline one, for CPUs without AVX2, slowly);
//  - column sums (bias, gain and shift gradients) add rows in order into `dst` (+=): a caller that sums
//    row blocks into separate buffers and adds those in block order gets results that do not depend on
//    how blocks were spread over threads;
//  - exp: Cephes expf (range reduction by ln 2 in two parts, degree-6 polynomial, 2^n by exponent bits),
//    relative error < 2e-7 on [-87, 88]; +inf above 88.723, subnormal below -87.34, 0 below -103.97,
//    nan stays nan. Its users: GELU's sigmoid and the softmax.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flatline::kernels {

// The variants this CPU runs, best first ("x86-64-v4", "x86-64-v3", "baseline"); the one in use (the
// first, unless use_variant changed it); use_variant(name) switches every kernel to that variant for
// the process (tests compare the variants' bits; throws std::invalid_argument for one not in variants()).
std::vector<std::string> variants();
std::string variant();
void use_variant(const std::string& name);

// y[i] = exp(x[i]) (the approximation above).
void exp(const float* x, float* y, int64_t n);

// LayerNorm of each row (Ba, Kiros & Hinton 2016; torch.nn.LayerNorm over the last dimension):
//   mean = sum(x) / cols, var = sum((x - mean)^2) / cols (two passes: no cancellation),
//   rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * gamma + beta.
// mean and rstd: one per row (the backward pass takes them).
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps);
// The residual add before a LayerNorm: s = a + b + bias (bias per column), then y = LayerNorm(s).
// s is written (the residual stream the next add reads).
void add_layernorm_forward(const float* a, const float* b, const float* bias, float* s, const float* gamma,
                           const float* beta, float* y, float* mean, float* rstd, int64_t rows, int64_t cols,
                           float eps);
// out = a + b + bias (bias per column): a projection's bias and the residual add in one pass.
void add_bias_residual(const float* a, const float* b, const float* bias, float* out, int64_t rows, int64_t cols);

// LayerNorm's backward pass, for y = LayerNorm(x) (x, mean, rstd of the forward pass), dy = dL/dy:
//   xhat = (x - mean) * rstd, g = dy * gamma,
//   dx = dres + rstd * (g - mean(g) - xhat * mean(g * xhat))
// where dres (optional: null = 0) is the gradient reaching x by the residual path. Column sums, added
// to: dgamma += dy * xhat, dbeta += dy, and if given dx_sum += dx (the gradient of the bias added to
// x in the forward pass) and dres_sum += dres (the bias on the residual path's other side).
void layernorm_backward(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma,
                        const float* dres, float* dx, float* dgamma, float* dbeta, float* dx_sum, float* dres_sum,
                        int64_t rows, int64_t cols);

// GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2's gelu, torch's gelu(approximate="tanh")):
//   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))) = x s, s = sigmoid(u), u = 2k (x + 0.044715 x^3),
//   k = sqrt(2 / pi); gelu'(x) = s + x s (1 - s) 2k (1 + 3 0.044715 x^2), x clamped to [-1e4, 1e4] in
//   the derivative (past it s is exactly 0 or 1 in float, and the polynomial stays finite).
void gelu_forward(const float* x, float* y, int64_t n);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);  // dx = dy * gelu'(x); dx may be dy
// The MLP's first bias and its GELU, with the derivative the backward pass needs computed while the
// sigmoid is at hand (so that the backward pass is one multiply per element, no exp): in: h, the
// pre-activation less its bias; out: a = gelu(h + bias), and in place h = gelu'(h + bias).
void bias_gelu_forward(float* h, const float* bias, float* a, int64_t rows, int64_t cols);
// dh = da * gelu' (dh may be da), and dbias += the column sums of dh.
void bias_gelu_backward(const float* gelu_grad, const float* da, float* dh, float* dbias, int64_t rows, int64_t cols);

// Causal softmax over stacked t x t score matrices (rows of `t` values; row r is row r % t of its
// matrix; [row0, row0 + rows) of the stack): p[i][j] = exp(scale s[i][j] - m) / sum for j <= i, where
// m = max over j <= i of scale s[i][j]; p[i][j] = 0 for j > i (s above the diagonal is not read).
// p may be s.
void causal_softmax_forward(const float* s, float* p, float scale, int64_t row0, int64_t rows, int64_t t);
// Its backward pass into the scores: ds[i][j] = scale p[i][j] (dp[i][j] - sum over j' <= i of dp p) for
// j <= i, 0 above. ds may be dp.
void causal_softmax_backward(const float* p, const float* dp, float* ds, float scale, int64_t row0, int64_t rows,
                             int64_t t);

// Attention heads. src: (batch * t) rows of `src_cols`; a part of width n_head * head_dim starts at
// column col0. dst: (batch * n_head, t, head_dim), contiguous. Rows [row0, row0 + rows) of src.
// split_heads: dst[b h][i][d] = src[b t + i][col0 + h head_dim + d] (+ bias[col0 + h head_dim + d] if
// bias is not null). merge_heads is its inverse (dst and src swap roles), and if col_sum is not null
// adds the merged values' column sums to col_sum[col0 ...] (the attention bias gradient).
void split_heads(const float* src, int64_t src_cols, int64_t col0, const float* bias, float* dst, int64_t t,
                 int64_t n_head, int64_t head_dim, int64_t row0, int64_t rows);
void merge_heads(const float* heads, float* dst, int64_t dst_cols, int64_t col0, float* col_sum, int64_t t,
                 int64_t n_head, int64_t head_dim, int64_t row0, int64_t rows);

// dst[c] += the column sums of rows x cols.
void add_column_sums(const float* x, float* dst, int64_t rows, int64_t cols);

}  // namespace flatline::kernels
