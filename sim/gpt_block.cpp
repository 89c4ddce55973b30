#include "sim/gpt_block.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "sim/kernels.h"

namespace flatline {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kRowBlock = 32;          // rows per block: the unit of threading and of the column sums
constexpr int64_t kMinTaskElems = 1 << 15;  // elements a thread's share must hold before rows are split

float* f(const at::Tensor& t) { return t.data_ptr<float>(); }

int64_t row_blocks(int64_t rows) { return (rows + kRowBlock - 1) / kRowBlock; }

// fn(first_row, rows, block) for each block of kRowBlock rows of `cols` values, over the intra-op threads.
template <class Fn>
void for_row_blocks(int64_t rows, int64_t cols, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, kMinTaskElems / std::max<int64_t>(1, kRowBlock * cols));
  at::parallel_for(0, row_blocks(rows), grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kRowBlock;
      fn(r0, std::min(kRowBlock, rows - r0), b);
    }
  });
}

// Per-block column sums, one row of `cols` per row block, added in block order at the end.
struct ColumnSums {
  ColumnSums(int64_t rows, int64_t cols, const at::TensorOptions& opt)
      : cols(cols), blocks(at::zeros({row_blocks(rows), cols}, opt)) {}
  float* block(int64_t b) const { return f(blocks) + b * cols; }
  at::Tensor total() const {
    at::Tensor out = at::zeros({cols}, blocks.options());
    kernels::add_column_sums(f(blocks), f(out), blocks.size(0), cols);
    return out;
  }
  int64_t cols;
  at::Tensor blocks;
};

void check_input(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined() && t.scalar_type() == at::kFloat && t.device().is_cpu(),
              "flatline kernels: ", what, ": expected a float32 CPU tensor");
}

struct BlockFn : public torch::autograd::Function<BlockFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& ln1_w,
                            const at::Tensor& ln1_b, const at::Tensor& attn_w, const at::Tensor& attn_b,
                            const at::Tensor& proj_w, const at::Tensor& proj_b, const at::Tensor& ln2_w,
                            const at::Tensor& ln2_b, const at::Tensor& fc_w, const at::Tensor& fc_b,
                            const at::Tensor& mlp_w, const at::Tensor& mlp_b, int64_t n_head, double eps_d) {
    const at::Tensor x = x_in.contiguous();
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T, H = n_head, hd = C / H;
    const float eps = static_cast<float>(eps_d), scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    const auto opt = x.options();
    // ---- attention: ln_1, qkv, heads, causal softmax, merge, projection ----
    at::Tensor xn1 = at::empty({N, C}, opt), mean1 = at::empty({N}, opt), rstd1 = at::empty({N}, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::layernorm_forward(f(x) + r0 * C, f(ln1_w), f(ln1_b), f(xn1) + r0 * C, f(mean1) + r0, f(rstd1) + r0, n,
                                 C, eps);
    });
    const at::Tensor qkv = at::mm(xn1, attn_w.t());  // (N, 3C), its bias added by split_heads
    at::Tensor q = at::empty({B * H, T, hd}, opt), k = at::empty_like(q), v = at::empty_like(q);
    for_row_blocks(N, 3 * C, [&](int64_t r0, int64_t n, int64_t) {
      int64_t part = 0;
      for (const at::Tensor* dst : {&q, &k, &v})
        kernels::split_heads(f(qkv), 3 * C, C * part++, f(attn_b), f(*dst), T, H, hd, r0, n);
    });
    at::Tensor att = at::bmm(q, k.transpose(1, 2));  // (B H, T, T) scores, then in place their softmax
    for_row_blocks(B * H * T, T, [&](int64_t r0, int64_t n, int64_t) {
      kernels::causal_softmax_forward(f(att) + r0 * T, f(att) + r0 * T, scale, r0, n, T);
    });
    const at::Tensor yh = at::bmm(att, v);  // (B H, T, hd)
    at::Tensor y = at::empty({N, C}, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::merge_heads(f(yh), f(y), C, 0, nullptr, T, H, hd, r0, n);
    });
    const at::Tensor o = at::mm(y, proj_w.t());
    // ---- residual + ln_2, MLP, residual ----
    at::Tensor x1 = at::empty({N, C}, opt), xn2 = at::empty({N, C}, opt), mean2 = at::empty({N}, opt),
               rstd2 = at::empty({N}, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::add_layernorm_forward(f(x) + r0 * C, f(o) + r0 * C, f(proj_b), f(x1) + r0 * C, f(ln2_w), f(ln2_b),
                                     f(xn2) + r0 * C, f(mean2) + r0, f(rstd2) + r0, n, C, eps);
    });
    at::Tensor h = at::mm(xn2, fc_w.t());  // (N, 4C): c_fc less its bias; then in place gelu' (the backward's)
    at::Tensor a = at::empty_like(h);
    for_row_blocks(N, 4 * C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::bias_gelu_forward(f(h) + r0 * 4 * C, f(fc_b), f(a) + r0 * 4 * C, n, 4 * C);
    });
    const at::Tensor m = at::mm(a, mlp_w.t());
    at::Tensor out = at::empty({B, T, C}, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::add_bias_residual(f(x1) + r0 * C, f(m) + r0 * C, f(mlp_b), f(out) + r0 * C, n, C);
    });
    ctx->save_for_backward({x, ln1_w, attn_w, proj_w, ln2_w, fc_w, mlp_w});
    for (auto& [name, t] : {std::pair<const char*, at::Tensor>{"mean1", mean1}, {"rstd1", rstd1}, {"xn1", xn1},
                            {"q", q}, {"k", k}, {"v", v}, {"att", att}, {"y", y}, {"x1", x1}, {"mean2", mean2},
                            {"rstd2", rstd2}, {"xn2", xn2}, {"gelu_grad", h}, {"a", a}})
      ctx->saved_data[name] = t;
    ctx->saved_data["n_head"] = n_head;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &ln1_w = saved[1], &attn_w = saved[2], &proj_w = saved[3], &ln2_w = saved[4],
                     &fc_w = saved[5], &mlp_w = saved[6];
    auto get = [&](const char* name) { return ctx->saved_data[name].toTensor(); };
    const at::Tensor mean1 = get("mean1"), rstd1 = get("rstd1"), xn1 = get("xn1"), q = get("q"), k = get("k"),
                     v = get("v"), att = get("att"), y = get("y"), x1 = get("x1"), mean2 = get("mean2"),
                     rstd2 = get("rstd2"), xn2 = get("xn2"), gelu_grad = get("gelu_grad"), a = get("a");
    const int64_t H = ctx->saved_data["n_head"].toInt();
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T, hd = C / H;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    const auto opt = x.options();
    const at::Tensor dout = grads[0].contiguous().view({N, C});
    // ---- MLP: mlp_c_proj, GELU with c_fc's bias, c_fc ----
    const at::Tensor dmlp_w = at::mm(dout.t(), a);
    at::Tensor dh = at::mm(dout, mlp_w);  // (N, 4C): da, then in place dh
    ColumnSums dfc_b(N, 4 * C, opt);
    for_row_blocks(N, 4 * C, [&](int64_t r0, int64_t n, int64_t b) {
      kernels::bias_gelu_backward(f(gelu_grad) + r0 * 4 * C, f(dh) + r0 * 4 * C, f(dh) + r0 * 4 * C, dfc_b.block(b), n,
                                  4 * C);
    });
    const at::Tensor dfc_w = at::mm(dh.t(), xn2), dxn2 = at::mm(dh, fc_w);
    // ---- ln_2 and the residual: dx1 = dout + ln_2's backward; the two biases on that stream ----
    at::Tensor dx1 = at::empty({N, C}, opt);
    ColumnSums dln2_w(N, C, opt), dln2_b(N, C, opt), dproj_b(N, C, opt), dmlp_b(N, C, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t b) {
      kernels::layernorm_backward(f(dxn2) + r0 * C, f(x1) + r0 * C, f(mean2) + r0, f(rstd2) + r0, f(ln2_w),
                                  f(dout) + r0 * C, f(dx1) + r0 * C, dln2_w.block(b), dln2_b.block(b),
                                  dproj_b.block(b), dmlp_b.block(b), n, C);
    });
    // ---- attention: projection, heads, softmax, q k v ----
    const at::Tensor dproj_w = at::mm(dx1.t(), y), dy = at::mm(dx1, proj_w);
    at::Tensor dyh = at::empty({B * H, T, hd}, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::split_heads(f(dy), C, 0, nullptr, f(dyh), T, H, hd, r0, n);
    });
    at::Tensor datt = at::bmm(dyh, v.transpose(1, 2));
    const at::Tensor dv = at::bmm(att.transpose(1, 2), dyh);
    for_row_blocks(B * H * T, T, [&](int64_t r0, int64_t n, int64_t) {
      kernels::causal_softmax_backward(f(att) + r0 * T, f(datt) + r0 * T, f(datt) + r0 * T, scale, r0, n, T);
    });
    const at::Tensor dq = at::bmm(datt, k), dk = at::bmm(datt.transpose(1, 2), q);
    at::Tensor dqkv = at::empty({N, 3 * C}, opt);
    ColumnSums dattn_b(N, 3 * C, opt);
    for_row_blocks(N, 3 * C, [&](int64_t r0, int64_t n, int64_t b) {
      int64_t part = 0;
      for (const at::Tensor* src : {&dq, &dk, &dv})
        kernels::merge_heads(f(*src), f(dqkv), 3 * C, C * part++, dattn_b.block(b), T, H, hd, r0, n);
    });
    const at::Tensor dattn_w = at::mm(dqkv.t(), xn1), dxn1 = at::mm(dqkv, attn_w);
    // ---- ln_1 and the residual ----
    at::Tensor dx = at::empty({B, T, C}, opt);
    ColumnSums dln1_w(N, C, opt), dln1_b(N, C, opt);
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t b) {
      kernels::layernorm_backward(f(dxn1) + r0 * C, f(x) + r0 * C, f(mean1) + r0, f(rstd1) + r0, f(ln1_w),
                                  f(dx1) + r0 * C, f(dx) + r0 * C, dln1_w.block(b), dln1_b.block(b), nullptr, nullptr,
                                  n, C);
    });
    return {dx,          dln1_w.total(), dln1_b.total(), dattn_w,     dattn_b.total(), dproj_w, dproj_b.total(),
            dln2_w.total(), dln2_b.total(), dfc_w, dfc_b.total(), dmlp_w, dmlp_b.total(), at::Tensor(), at::Tensor()};
  }
};

struct LayerNormFn : public torch::autograd::Function<LayerNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& b,
                            double eps) {
    const at::Tensor x = x_in.contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    at::Tensor y = at::empty_like(x), mean = at::empty({N}, x.options()), rstd = at::empty({N}, x.options());
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t) {
      kernels::layernorm_forward(f(x) + r0 * C, f(w), f(b), f(y) + r0 * C, f(mean) + r0, f(rstd) + r0, n, C,
                                 static_cast<float>(eps));
    });
    ctx->save_for_backward({x, w, mean, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &w = s[1], &mean = s[2], &rstd = s[3];
    const int64_t C = x.size(-1), N = x.numel() / C;
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dx = at::empty_like(x);
    ColumnSums dw(N, C, x.options()), db(N, C, x.options());
    for_row_blocks(N, C, [&](int64_t r0, int64_t n, int64_t b) {
      kernels::layernorm_backward(f(dy) + r0 * C, f(x) + r0 * C, f(mean) + r0, f(rstd) + r0, f(w), nullptr,
                                  f(dx) + r0 * C, dw.block(b), db.block(b), nullptr, nullptr, n, C);
    });
    return {dx, dw.total(), db.total(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_block(const at::Tensor& x, const BlockWeights& w, int64_t n_head, double eps) {
  check_input(x, "block input");
  TORCH_CHECK(x.dim() == 3 && x.size(2) % n_head == 0, "flatline kernels: block input: expected (B, T, C) with C % ",
              n_head, " == 0, got ", x.sizes());
  for (const at::Tensor* t : {&w.ln1_w, &w.ln1_b, &w.attn_w, &w.attn_b, &w.proj_w, &w.proj_b, &w.ln2_w, &w.ln2_b,
                              &w.fc_w, &w.fc_b, &w.mlp_w, &w.mlp_b}) {
    check_input(*t, "block weight");
    TORCH_CHECK(t->is_contiguous(), "flatline kernels: block weights must be contiguous");
  }
  return BlockFn::apply(x, w.ln1_w, w.ln1_b, w.attn_w, w.attn_b, w.proj_w, w.proj_b, w.ln2_w, w.ln2_b, w.fc_w,
                        w.fc_b, w.mlp_w, w.mlp_b, n_head, eps);
}

at::Tensor fused_layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  check_input(x, "LayerNorm input");
  check_input(weight, "LayerNorm weight");
  check_input(bias, "LayerNorm bias");
  TORCH_CHECK(weight.is_contiguous() && bias.is_contiguous() && weight.numel() == x.size(-1) &&
                  bias.numel() == x.size(-1),
              "flatline kernels: LayerNorm: weight and bias must be contiguous, of the last dimension's size");
  return LayerNormFn::apply(x, weight, bias, eps);
}

}  // namespace flatline
