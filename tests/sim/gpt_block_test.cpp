// The fused GPT block and LayerNorm of `kernels: flatline` (sim/gpt_block.h) against the same block
// written with ATen's ops under autograd in float64 (the definition, as sim/models.cpp's module path
// computes it), in the output and all thirteen gradients; bit-identical at 1 and 3 intra-op threads.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <limits>

#include "sim/gpt_block.h"
#include "sim/kernels.h"
#include "sim/torch_pch.h"

namespace flatline {
namespace {

constexpr double kEps = 1e-5;

std::vector<at::Tensor> as_list(const BlockWeights& w) {
  return {w.ln1_w, w.ln1_b, w.attn_w, w.attn_b, w.proj_w, w.proj_b, w.ln2_w, w.ln2_b, w.fc_w, w.fc_b, w.mlp_w, w.mlp_b};
}

BlockWeights from_list(const std::vector<at::Tensor>& v) {
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]};
}

// Random weights, gains near 1: a block as training leaves it, not as initialised (biases 0).
BlockWeights random_weights(int64_t C, uint64_t seed) {
  at::manual_seed(seed);
  auto n = [](std::vector<int64_t> s, double sd) { return at::randn(s) * sd; };
  return {1 + n({C}, 0.1),   n({C}, 0.1), n({3 * C, C}, 0.3), n({3 * C}, 0.1), n({C, C}, 0.2),
          n({C}, 0.1),       1 + n({C}, 0.1), n({C}, 0.1),    n({4 * C, C}, 0.3), n({4 * C}, 0.5),
          n({C, 4 * C}, 0.2), n({C}, 0.1)};
}

// The block as ATen's ops define it (nn::LayerNorm, nn::Linear, masked softmax, gelu(approximate="tanh")).
at::Tensor reference_block(const at::Tensor& x, const BlockWeights& w, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / H;
  at::Tensor qkv = at::linear(at::layer_norm(x, {C}, w.ln1_w, w.ln1_b, kEps), w.attn_w, w.attn_b);
  auto heads = [&](const at::Tensor& t) { return t.reshape({B, T, H, hd}).transpose(1, 2); };
  at::Tensor q = heads(qkv.slice(2, 0, C)), k = heads(qkv.slice(2, C, 2 * C)), v = heads(qkv.slice(2, 2 * C));
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  att = att.masked_fill(at::ones({T, T}, at::kBool).triu(1), -std::numeric_limits<double>::infinity()).softmax(-1);
  at::Tensor y = at::matmul(att, v).transpose(1, 2).reshape({B, T, C});
  at::Tensor x1 = x + at::linear(y, w.proj_w, w.proj_b);
  at::Tensor h = at::linear(at::layer_norm(x1, {C}, w.ln2_w, w.ln2_b, kEps), w.fc_w, w.fc_b);
  return x1 + at::linear(at::gelu(h, "tanh"), w.mlp_w, w.mlp_b);
}

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;  // x, then the twelve weights
};

Result run(const at::Tensor& x0, const BlockWeights& w0, const at::Tensor& dout, int64_t H, bool fused,
           at::ScalarType dtype) {
  at::Tensor x = x0.to(dtype).clone().requires_grad_(true);  // fresh leaves: gradients do not accumulate across runs
  std::vector<at::Tensor> ws;
  for (const auto& t : as_list(w0)) ws.push_back(t.to(dtype).clone().requires_grad_(true));
  const BlockWeights w = from_list(ws);
  Result r;
  r.out = fused ? fused_block(x, w, H, kEps) : reference_block(x, w, H);
  r.out.backward(dout.to(dtype));
  r.grads.push_back(x.grad());
  for (const auto& t : ws) r.grads.push_back(t.grad());
  return r;
}

// max |a - b| over max |b|: the error relative to the tensor's scale.
double scaled_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b).abs().max().item<double>() / b.abs().max().item<double>();
}

}  // namespace

TEST(GptBlock, MatchesTheAtenBlockInFloat64InOutputAndEveryGradient) {
  struct Shape {
    int64_t B, T, C, H;
  };
  // odd sizes (rows and columns off the 8 lanes, T < one lane), several row blocks, GPT-like sizes
  for (const Shape s : {Shape{2, 7, 12, 3}, Shape{3, 37, 20, 2}, Shape{4, 64, 64, 4}}) {
    const BlockWeights w = random_weights(s.C, 5 + s.T);
    at::Tensor x = at::randn({s.B, s.T, s.C}), dout = at::randn({s.B, s.T, s.C});
    const Result ref = run(x, w, dout, s.H, /*fused=*/false, at::kDouble);
    const Result fused = run(x, w, dout, s.H, /*fused=*/true, at::kFloat);
    const Result aten = run(x, w, dout, s.H, /*fused=*/false, at::kFloat);  // what ATen's float32 achieves
    EXPECT_EQ(fused.out.sizes(), ref.out.sizes());
    const double out_err = scaled_error(fused.out, ref.out);
    EXPECT_LT(out_err, 2e-6) << s.T;  // measured 2e-7 .. 7e-7
    EXPECT_GT(ref.out.abs().max().item<double>(), 1.0);
    RecordProperty("out_error_T" + std::to_string(s.T), std::to_string(out_err));
    const char* names[] = {"x",    "ln1_w", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b",
                           "ln2_w", "ln2_b", "fc_w", "fc_b",   "mlp_w",  "mlp_b"};
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      ASSERT_TRUE(fused.grads[i].defined()) << names[i];
      EXPECT_EQ(fused.grads[i].sizes(), ref.grads[i].sizes()) << names[i];
      EXPECT_GT(ref.grads[i].abs().max().item<double>(), 1e-3) << names[i];  // real gradients
      // measured: fused 9e-8 .. 1.8e-6, ATen's float32 6e-8 .. 2.1e-6 (largest at T 64, for dx)
      const double e = scaled_error(fused.grads[i], ref.grads[i]), ea = scaled_error(aten.grads[i], ref.grads[i]);
      EXPECT_LT(e, 3e-6) << names[i] << " T " << s.T << " (ATen float32: " << ea << ")";
      EXPECT_LT(e, 2 * ea + 2e-7) << names[i] << " T " << s.T << ": no less accurate than ATen's float32";
    }
  }
}

TEST(GptBlock, GivesTheSameBitsAtAnyNumberOfThreads) {
  // large enough that rows are split over threads (several tasks of row blocks per kernel)
  const int64_t B = 16, T = 128, C = 32, H = 2;
  const BlockWeights w = random_weights(C, 9);
  at::Tensor x = at::randn({B, T, C}), dout = at::randn({B, T, C});
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const Result one = run(x, w, dout, H, true, at::kFloat);
  at::set_num_threads(3);
  const Result three = run(x, w, dout, H, true, at::kFloat);
  at::set_num_threads(before);
  EXPECT_TRUE(at::equal(one.out, three.out));
  for (size_t i = 0; i < one.grads.size(); ++i) EXPECT_TRUE(at::equal(one.grads[i], three.grads[i])) << i;
}

// Every instruction-set variant of the kernels this CPU runs (sim/kernels.h): the same bits, in the
// block's output and gradients (which pass through every block kernel) and in exp and GELU on their own.
TEST(GptBlock, EveryKernelVariantGivesTheSameBits) {
  const std::vector<std::string> variants = kernels::variants();
  ASSERT_FALSE(variants.empty());
  EXPECT_EQ(kernels::variant(), variants.front());
  EXPECT_EQ(variants.back(), "baseline");
  EXPECT_THROW(kernels::use_variant("no-such-isa"), std::invalid_argument);
  const int64_t B = 3, T = 45, C = 24, H = 3;  // rows and columns off the 8 lanes
  const BlockWeights w = random_weights(C, 13);
  at::Tensor x = at::randn({B, T, C}) * 2, dout = at::randn({B, T, C});
  at::Tensor z = at::cat({at::linspace(-110, 95, 997), at::randn({999}) * 30});  // exp's edges, GELU's tails
  const int64_t n = z.numel();
  std::optional<Result> first;
  at::Tensor first_misc;
  for (const std::string& v : variants) {
    kernels::use_variant(v);
    EXPECT_EQ(kernels::variant(), v);
    const Result r = run(x, w, dout, H, true, at::kFloat);
    at::Tensor misc = at::empty({3, n});
    kernels::exp(z.data_ptr<float>(), misc[0].data_ptr<float>(), n);
    kernels::gelu_forward(z.data_ptr<float>(), misc[1].data_ptr<float>(), n);
    kernels::gelu_backward(z.data_ptr<float>(), dout.flatten().slice(0, 0, 1).expand({n}).contiguous().data_ptr<float>(),
                           misc[2].data_ptr<float>(), n);
    if (!first) {
      first = r;
      first_misc = misc;
      continue;
    }
    EXPECT_TRUE(at::equal(r.out, first->out)) << v << " vs " << variants.front();
    for (size_t i = 0; i < r.grads.size(); ++i) EXPECT_TRUE(at::equal(r.grads[i], first->grads[i])) << v << " grad " << i;
    // nan == nan bitwise: compare the bits
    EXPECT_TRUE(at::equal(misc.view(at::kInt), first_misc.view(at::kInt))) << v;
  }
  kernels::use_variant(variants.front());
  RecordProperty("variants", std::to_string(variants.size()));
}

TEST(GptBlock, LayerNormMatchesAtenInFloat64) {
  at::manual_seed(4);
  at::Tensor x = (at::randn({3, 5, 40}) * 2 + 3).requires_grad_(true), w = (1 + at::randn({40}) * 0.1).requires_grad_(true),
             b = (at::randn({40}) * 0.1).requires_grad_(true), dy = at::randn({3, 5, 40});
  at::Tensor xd = x.detach().to(at::kDouble).requires_grad_(true), wd = w.detach().to(at::kDouble).requires_grad_(true),
             bd = b.detach().to(at::kDouble).requires_grad_(true);
  at::Tensor y = fused_layernorm(x, w, b, kEps), ref = at::layer_norm(xd, {40}, wd, bd, kEps);
  y.backward(dy);
  ref.backward(dy.to(at::kDouble));
  EXPECT_LT(scaled_error(y, ref), 1e-6);
  EXPECT_LT(scaled_error(x.grad(), xd.grad()), 2e-6);
  EXPECT_LT(scaled_error(w.grad(), wd.grad()), 1e-6);
  EXPECT_LT(scaled_error(b.grad(), bd.grad()), 1e-6);
}

TEST(GptBlock, RejectsWhatItCannotRun) {
  const BlockWeights w = random_weights(8, 1);
  EXPECT_THROW(fused_block(at::randn({1, 4, 8}, at::kDouble), w, 2, kEps), c10::Error);  // float32 only
  EXPECT_THROW(fused_block(at::randn({1, 4, 8}), w, 3, kEps), c10::Error);               // 8 % 3 heads
  EXPECT_THROW(fused_layernorm(at::randn({2, 8}), at::ones({7}), at::zeros({7}), kEps), c10::Error);
}

}  // namespace flatline
