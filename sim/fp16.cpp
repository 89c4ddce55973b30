#include "sim/fp16.h"

#include <limits>

namespace flatline {
namespace {

struct RoundThrough : public torch::autograd::Function<RoundThrough> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::ScalarType half,
                            bool inject_inf) {
    ctx->saved_data["inf"] = inject_inf;
    ctx->saved_data["half"] = static_cast<int64_t>(half);
    return round_to(x, half);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    at::Tensor g = round_to(grad[0], static_cast<at::ScalarType>(ctx->saved_data["half"].toInt()));
    if (ctx->saved_data["inf"].toBool()) g = at::full_like(g, std::numeric_limits<float>::infinity());
    return {g, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor round_to(const at::Tensor& x, at::ScalarType half) { return x.to(half).to(x.scalar_type()); }

at::Tensor round_through(const at::Tensor& x, at::ScalarType half, bool inject_inf) {
  return RoundThrough::apply(x, half, inject_inf);
}

}  // namespace flatline
