#include "sim/fp16.h"

#include <limits>

namespace flatline {
namespace {

struct Fp16Round : public torch::autograd::Function<Fp16Round> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, bool inject_inf) {
    ctx->saved_data["inf"] = inject_inf;
    return to_fp16_and_back(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    at::Tensor g = to_fp16_and_back(grad[0]);
    if (ctx->saved_data["inf"].toBool()) g = at::full_like(g, std::numeric_limits<float>::infinity());
    return {g, at::Tensor()};
  }
};

}  // namespace

at::Tensor to_fp16_and_back(const at::Tensor& x) { return x.to(at::kHalf).to(x.scalar_type()); }

at::Tensor fp16_round(const at::Tensor& x, bool inject_inf) { return Fp16Round::apply(x, inject_inf); }

}  // namespace flatline
