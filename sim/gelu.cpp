#include "sim/gelu.h"

namespace flatline {
namespace {

constexpr double kTwoK = 1.5957691216057308;  // 2 sqrt(2 / pi)
constexpr double kCubic = 0.044715;

// sigmoid(2k (x + c x^3)); out-of-place ATen ops (in-place sigmoid_ is ~3x slower in this LibTorch)
at::Tensor gate(const at::Tensor& x, const at::Tensor& x2) { return at::sigmoid(at::addcmul(x, x2, x, kCubic) * kTwoK); }

struct GeluTanh : public torch::autograd::Function<GeluTanh> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return x * gate(x, x.square());
  }

  // d/dx [x s(u)] = s + x s (1 - s) du/dx, s = sigmoid(u), u = 2k (x + c x^3), du/dx = 2k (1 + 3c x^2)
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    // Past |x| = 1e4 the gate is exactly 0 or 1 in float, so s (1 - s) = 0; clamping keeps the
    // polynomial factor finite there (else 0 * inf = nan from |x| ~ 1.5e13, where at::gelu gives 0 or 1).
    const at::Tensor x = ctx->get_saved_variables()[0].clamp(-1e4, 1e4);
    at::Tensor x2 = x.square();
    const at::Tensor s = gate(x, x2);
    at::Tensor d = x2.mul_(3 * kCubic * kTwoK).add_(kTwoK).mul_(x).mul_(s).mul_(at::rsub(s, 1)).add_(s);
    return {d.mul_(grad[0])};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu_tanh: expected float32, got ", x.scalar_type());
  return GeluTanh::apply(x);
}

}  // namespace flatline
