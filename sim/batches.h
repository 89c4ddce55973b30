// A rank's training and held-out data as batches of tensors (torch; only sim/ includes this): the
// collate step of a DataLoader, from the sample ids the sampler (run/sampler.h) or the eval loop picks
// to the (x, y) pair the model takes (sim/models.h).
//  - text: sample i is block i of the byte corpus (sim/data.h): x its `block` bytes, y the same shifted
//    by one (next-byte prediction), both (n, block) int64;
//  - fashion_mnist: x (n, 1, rows, cols) float32, normalised with the dataset's mean and std (0.2860,
//    0.3530), y (n) int64 labels.
// The tensors are on the CPU; the step moves them to its device.
#pragma once
#include <cstdint>
#include <utility>

#include "run/scenario.h"
#include "sim/data.h"
#include "sim/torch_pch.h"

namespace flatline {

struct TrainData {
  TextCorpus text;
  ImageSet images;
  bool is_text = true;
  int block = 64;
  int64_t train_size() const;  // samples in the training split
  int64_t eval_size() const;   // samples in the held-out split
  // The batch of samples ids[0..n-1] of the training split, or of the held-out one (`eval`).
  std::pair<at::Tensor, at::Tensor> batch(const int64_t* ids, int n, bool eval) const;
};

// The scenario's data (`data:`; the Debian defaults of sim/data.h when no path is given). Throws
// std::runtime_error naming the file, as sim/data.h's loaders do.
TrainData load_train_data(const Scenario& s);

}  // namespace flatline
