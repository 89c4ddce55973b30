// The two real models the harness trains (torch; only sim/ includes this):
//  - GPT: byte-level decoder-only transformer (GPT-2 layout, as in karpathy/nanoGPT and llm.c):
//    token + learned position embeddings, n_layer pre-LayerNorm blocks of causal self-attention and a
//    4x GELU(tanh) MLP, final LayerNorm, lm head tied to the token embedding (or untied). Init N(0, 0.02),
//    residual projections N(0, 0.02 / sqrt(2 n_layer)) (GPT-2 paper, sec. 2.3). Vocab 256 (bytes).
//  - CNN: a small Fashion-MNIST classifier: [conv3x3(c) ReLU maxpool2] -> [conv3x3(2c) ReLU maxpool2]
//    -> linear(hidden) ReLU -> linear(10). PyTorch default init.
// Both return the mean cross-entropy of a batch. set_precision("fp16" | "bf16") rounds activations and
// their gradients through that format at module boundaries (sim/fp16.h), emulating it on CPU; the
// `kernels: aten` step runs the model under real autocast instead (sim/amp.h). set_aten_kernels(true)
// runs the GPT's blocks and final LayerNorm as modules under autograd (ATen's LayerNorm, GELU, softmax:
// any dtype and device, autocast's half-precision activations included); false, the flatline kernels,
// runs them as the fused autograd functions of sim/gpt_block.h (float32 on the CPU). The parameters,
// their names and their order are the same either way (checkpoints move between the two), float32 on
// the model's device (model->to(device)).
#pragma once
#include <memory>
#include <vector>

#include "run/scenario.h"
#include "sim/torch_pch.h"

namespace flatline {

class TrainModel : public torch::nn::Module {
 public:
  // x: GPT (B, T) int64 tokens; CNN (B, 1, 28, 28) float. y: GPT (B, T) int64; CNN (B) int64.
  virtual at::Tensor loss(const at::Tensor& x, const at::Tensor& y) = 0;
  // "fp32" | "fp16" | "bf16": the format activations and their gradients are rounded through.
  void set_precision(const std::string& p) { half_ = p == "fp16" ? at::kHalf : p == "bf16" ? at::kBFloat16 : at::kFloat; }
  // Makes one activation inf in the backward pass of the next forward (loss_scale_collapse).
  void set_inject_inf(bool on) { inject_inf_ = on; }
  void set_aten_kernels(bool on) { aten_ = on; }

 protected:
  at::Tensor boundary(const at::Tensor& x);  // fp16 rounding at a module boundary (identity in fp32)
  at::ScalarType half_ = at::kFloat;
  bool inject_inf_ = false;
  bool aten_ = false;
};

std::shared_ptr<TrainModel> make_model(const ModelSpec& spec);

}  // namespace flatline
