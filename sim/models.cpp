#include "sim/models.h"

#include <cmath>
#include <stdexcept>

#include "sim/fp16.h"
#include "sim/gpt_block.h"

namespace flatline {
namespace F = torch::nn::functional;
using torch::nn::Embedding;
using torch::nn::LayerNorm;
using torch::nn::LayerNormOptions;
using torch::nn::Linear;
using torch::nn::LinearOptions;

at::Tensor TrainModel::boundary(const at::Tensor& x) {
  if (half_ == at::kFloat && !inject_inf_) return x;
  bool inf = inject_inf_;
  inject_inf_ = false;  // one layer overflows, once per forward
  // fp32 (and real autocast): no rounding, only the injected overflow
  return round_through(x, half_ == at::kFloat ? x.scalar_type() : half_, inf);
}

namespace {

struct Block : torch::nn::Module {
  Block(int n_embd, int n_head, int n_layer, int block_size, const bool& aten)
      : n_head(n_head),
        aten(aten),
        ln1(register_module("ln_1", LayerNorm(LayerNormOptions({n_embd})))),
        c_attn(register_module("c_attn", Linear(n_embd, 3 * n_embd))),
        c_proj(register_module("attn_c_proj", Linear(n_embd, n_embd))),
        ln2(register_module("ln_2", LayerNorm(LayerNormOptions({n_embd})))),
        c_fc(register_module("c_fc", Linear(n_embd, 4 * n_embd))),
        mlp_proj(register_module("mlp_c_proj", Linear(4 * n_embd, n_embd))) {
    // causal mask as an additive bias (0 on and below the diagonal, -inf above), fused into the score
    // matmul by baddbmm: one op instead of scale + masked_fill, forward and backward
    attn_bias = register_buffer(
        "attn_bias", at::zeros({block_size, block_size}).masked_fill_(
                         at::ones({block_size, block_size}, at::kBool).triu(1), -std::numeric_limits<float>::infinity()));
    const double std_resid = 0.02 / std::sqrt(2.0 * n_layer);
    for (auto* l : {&c_attn, &c_fc}) {
      torch::nn::init::normal_((*l)->weight, 0.0, 0.02);
      torch::nn::init::zeros_((*l)->bias);
    }
    for (auto* l : {&c_proj, &mlp_proj}) {
      torch::nn::init::normal_((*l)->weight, 0.0, std_resid);
      torch::nn::init::zeros_((*l)->bias);
    }
  }

  at::Tensor attention(const at::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto qkv = c_attn(x).split(C, 2);
    const auto hd = C / n_head;
    auto heads = [&](const at::Tensor& t) {  // (B, T, C) -> (B * n_head, T, hd)
      return t.view({B, T, n_head, hd}).transpose(1, 2).reshape({B * n_head, T, hd});
    };
    at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    // softmax(q k^T / sqrt(hd) + causal bias)
    at::Tensor att = at::baddbmm(attn_bias.slice(0, 0, T).slice(1, 0, T), q, k.transpose(1, 2), 1.0,
                                 1.0 / std::sqrt(static_cast<double>(hd)));
    att = at::softmax(att, -1);
    at::Tensor y = at::bmm(att, v).view({B, n_head, T, hd}).transpose(1, 2).contiguous().view({B, T, C});
    return c_proj(y);
  }

  at::Tensor forward(at::Tensor x) {
    // flatline kernels: the same block with its passes written out and its elementwise chains fused
    // (sim/gpt_block.h); aten: the modules under autograd, as PyTorch runs them
    if (!aten)
      return fused_block(x,
                         {ln1->weight, ln1->bias, c_attn->weight, c_attn->bias, c_proj->weight, c_proj->bias,
                          ln2->weight, ln2->bias, c_fc->weight, c_fc->bias, mlp_proj->weight, mlp_proj->bias},
                         n_head, ln1->options.eps());
    x = x + attention(ln1(x));
    at::Tensor h = c_fc(ln2(x));
    return x + mlp_proj(at::gelu(h, "tanh"));
  }

  int n_head;
  const bool& aten;  // the model's set_aten_kernels
  LayerNorm ln1;
  Linear c_attn, c_proj;
  LayerNorm ln2;
  Linear c_fc, mlp_proj;
  at::Tensor attn_bias;
};

class Gpt : public TrainModel {
 public:
  explicit Gpt(const ModelSpec& s)
      : spec_(s),
        wte_(register_module("wte", Embedding(256, s.n_embd))),
        wpe_(register_module("wpe", Embedding(s.block_size, s.n_embd))),
        ln_f_(register_module("ln_f", LayerNorm(LayerNormOptions({s.n_embd})))) {
    torch::nn::init::normal_(wte_->weight, 0.0, 0.02);
    torch::nn::init::normal_(wpe_->weight, 0.0, 0.02);
    for (int i = 0; i < s.n_layer; ++i)
      blocks_.push_back(register_module("h" + std::to_string(i),
                                        std::make_shared<Block>(s.n_embd, s.n_head, s.n_layer, s.block_size, aten_)));
    if (!s.tied_head) {
      lm_head_ = register_parameter("lm_head", at::empty({256, s.n_embd}));
      torch::nn::init::normal_(lm_head_, 0.0, 0.02);
    }
  }

  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets) override {
    const auto T = idx.size(1);
    if (T > spec_.block_size) throw std::invalid_argument("sequence longer than block_size");
    at::Tensor pos = at::arange(T, idx.options());
    at::Tensor x = boundary(wte_(idx) + wpe_(pos));
    for (auto& b : blocks_) x = boundary(b->forward(x));
    x = aten_ ? ln_f_(x) : fused_layernorm(x, ln_f_->weight, ln_f_->bias, ln_f_->options.eps());
    at::Tensor logits = boundary(at::matmul(x, (spec_.tied_head ? wte_->weight : lm_head_).t()));
    return at::cross_entropy_loss(logits.view({-1, 256}), targets.reshape({-1}));
  }

 private:
  ModelSpec spec_;
  Embedding wte_, wpe_;
  std::vector<std::shared_ptr<Block>> blocks_;
  LayerNorm ln_f_;
  at::Tensor lm_head_;
};

class Cnn : public TrainModel {
 public:
  explicit Cnn(const ModelSpec& s)
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, s.channels, 3).padding(1)))),
        conv2_(register_module("conv2",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(s.channels, 2 * s.channels, 3).padding(1)))),
        fc1_(register_module("fc1", Linear(2 * s.channels * 7 * 7, s.hidden))),
        fc2_(register_module("fc2", Linear(s.hidden, 10))) {}

  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) override {
    at::Tensor h = boundary(at::max_pool2d(at::relu(conv1_(x)), {2, 2}));
    h = boundary(at::max_pool2d(at::relu(conv2_(h)), {2, 2}));
    h = boundary(at::relu(fc1_(h.flatten(1))));
    return at::cross_entropy_loss(boundary(fc2_(h)), y);
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  Linear fc1_, fc2_;
};

}  // namespace

std::shared_ptr<TrainModel> make_model(const ModelSpec& spec) {
  if (spec.kind == "gpt") return std::make_shared<Gpt>(spec);
  if (spec.kind == "cnn") return std::make_shared<Cnn>(spec);
  throw std::invalid_argument("unknown model kind '" + spec.kind + "'");
}

}  // namespace flatline
