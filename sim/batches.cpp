#include "sim/batches.h"

namespace flatline {

int64_t TrainData::train_size() const {
  return is_text ? static_cast<int64_t>(text.train.size() - 1) / block : images.train_size();
}

int64_t TrainData::eval_size() const {
  return is_text ? static_cast<int64_t>(text.eval.size() - 1) / block : images.eval_size();
}

std::pair<at::Tensor, at::Tensor> TrainData::batch(const int64_t* ids, int n, bool eval) const {
  if (is_text) {
    const auto& src = eval ? text.eval : text.train;
    at::Tensor x = at::empty({n, block}, at::kLong), y = at::empty({n, block}, at::kLong);
    auto* px = x.data_ptr<int64_t>();
    auto* py = y.data_ptr<int64_t>();
    for (int i = 0; i < n; ++i) {
      const uint8_t* p = src.data() + ids[i] * block;
      for (int j = 0; j < block; ++j) {
        px[i * block + j] = p[j];
        py[i * block + j] = p[j + 1];
      }
    }
    return {x, y};
  }
  const auto& img = eval ? images.eval_images : images.train_images;
  const auto& lab = eval ? images.eval_labels : images.train_labels;
  const int px_per = images.rows * images.cols;
  at::Tensor x = at::empty({n, 1, images.rows, images.cols}, at::kFloat), y = at::empty({n}, at::kLong);
  auto* pxf = x.data_ptr<float>();
  auto* py = y.data_ptr<int64_t>();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < px_per; ++j)  // FashionMNIST mean/std normalisation (0.2860, 0.3530)
      pxf[i * px_per + j] = (img[ids[i] * px_per + j] / 255.0f - 0.2860f) / 0.3530f;
    py[i] = lab[ids[i]];
  }
  return {x, y};
}

TrainData load_train_data(const Scenario& s) {
  TrainData d;
  d.is_text = s.data.kind == "text";
  d.block = s.model.block_size;
  if (d.is_text) d.text = load_text(s.data.path.empty() ? kDefaultTextPath : s.data.path, s.data.eval_fraction);
  else d.images = load_fashion_mnist(s.data.path.empty() ? kDefaultFashionMnistPath : s.data.path);
  return d;
}

}  // namespace flatline
