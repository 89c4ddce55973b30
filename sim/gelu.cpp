#include "sim/gelu.h"

#include <ATen/Parallel.h>

#include "sim/kernels.h"

namespace flatline {
namespace {

constexpr int64_t kGrain = 1 << 15;  // elements per task over the intra-op threads

struct GeluTanh : public torch::autograd::Function<GeluTanh> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in) {
    const at::Tensor x = x_in.contiguous();
    ctx->save_for_backward({x});
    at::Tensor y = at::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) { kernels::gelu_forward(px + b, py + b, e - b); });
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const at::Tensor x = ctx->get_saved_variables()[0], dy = grad[0].contiguous();
    at::Tensor dx = at::empty_like(x);
    const float *px = x.data_ptr<float>(), *pdy = dy.data_ptr<float>();
    float* pdx = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain,
                     [&](int64_t b, int64_t e) { kernels::gelu_backward(px + b, pdy + b, pdx + b, e - b); });
    return {dx};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.device().is_cpu(), "gelu_tanh: expected float32 on the CPU, got ",
              x.scalar_type(), " on ", x.device());
  return GeluTanh::apply(x);
}

}  // namespace flatline
