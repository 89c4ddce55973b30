// Datasets on disk (plain C++, no torch): the bytes of a text corpus and the images of Fashion-MNIST.
// Defaults are the Debian packages the project installs:
//   text:          /usr/share/games/fortunes (package `fortunes`): every fortune text file (regular
//                  files without an extension, so not the .dat indexes nor the .u8 links), sorted by
//                  name, concatenated.
//   fashion_mnist: /usr/share/datasets/fashion-mnist (package `dataset-fashion-mnist`): the IDX files
//                  (gzip) train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz (Y. LeCun's IDX format:
//                  big-endian magic 0x00000803 / 0x00000801, then dimensions, then uint8 data).
// Errors (missing file, bad magic, truncated data) throw std::runtime_error naming the file and offset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flatline {

constexpr const char* kDefaultTextPath = "/usr/share/games/fortunes";
constexpr const char* kDefaultFashionMnistPath = "/usr/share/datasets/fashion-mnist";

// A byte-level corpus split into a train part and a held-out eval tail.
struct TextCorpus {
  std::vector<uint8_t> train, eval;
  std::vector<std::string> files;  // what was read, in order
};
// `path`: a directory (every extension-less regular file, sorted) or one file.
TextCorpus load_text(const std::string& path, double eval_fraction);

struct ImageSet {
  int rows = 28, cols = 28;
  std::vector<uint8_t> train_images, eval_images;  // n x rows x cols, row-major
  std::vector<uint8_t> train_labels, eval_labels;  // 0..9
  int64_t train_size() const { return static_cast<int64_t>(train_labels.size()); }
  int64_t eval_size() const { return static_cast<int64_t>(eval_labels.size()); }
};
// Reads train-* for training and t10k-* for eval from `dir`.
ImageSet load_fashion_mnist(const std::string& dir);

// Reads an IDX file, gzip-compressed or not; returns dims and the uint8 payload.
std::vector<uint8_t> read_idx(const std::string& path, std::vector<int>* dims);

}  // namespace flatline
