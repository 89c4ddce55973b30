#include "sim/data.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace flatline {
namespace fs = std::filesystem;

namespace {
// Data is a file of bytes of known size: a FIFO blocks the rank forever, /dev/zero never ends, so only
// regular files (or links to them) are read.
void require_regular_file(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot open: " + ec.message());
  if (fs::is_regular_file(st)) return;
  const char* what = fs::is_fifo(st) ? "a FIFO" : fs::is_character_file(st) ? "a character device"
                     : fs::is_block_file(st) ? "a block device" : fs::is_socket(st) ? "a socket"
                     : fs::is_directory(st) ? "a directory" : "not a regular file";
  throw std::runtime_error(fmt::format("{}: is {}; training data must be a regular file", path, what));
}

std::vector<uint8_t> read_file(const std::string& path) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// gzread handles plain files too (transparent mode), so one reader serves both.
std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  require_regular_file(path);
  gzFile g = gzopen(path.c_str(), "rb");
  if (!g) throw std::runtime_error(path + ": cannot open");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(g, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(g, &err);
      gzclose(g);
      throw std::runtime_error(fmt::format("{}: gzip error at byte {}: {}", path, out.size(), msg));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(g);
  return out;
}
}  // namespace

TextCorpus load_text(const std::string& path, double eval_fraction) {
  TextCorpus c;
  std::vector<uint8_t> all;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.is_symlink() || !e.is_regular_file()) continue;
      if (e.path().filename().string().find('.') != std::string::npos) continue;
      c.files.push_back(e.path().string());
    }
    std::sort(c.files.begin(), c.files.end());
  } else {
    c.files.push_back(path);
  }
  if (c.files.empty()) throw std::runtime_error(path + ": no text files found (is the `fortunes` package installed?)");
  for (const auto& f : c.files) {
    auto b = read_file(f);
    all.insert(all.end(), b.begin(), b.end());
  }
  if (all.size() < 4096) throw std::runtime_error(fmt::format("{}: corpus too small ({} bytes)", path, all.size()));
  size_t n_eval = static_cast<size_t>(static_cast<double>(all.size()) * eval_fraction);
  c.train.assign(all.begin(), all.end() - static_cast<std::ptrdiff_t>(n_eval));
  c.eval.assign(all.end() - static_cast<std::ptrdiff_t>(n_eval), all.end());
  return c;
}

std::vector<uint8_t> read_idx(const std::string& path, std::vector<int>* dims) {
  auto b = read_maybe_gzip(path);
  auto be32 = [&](size_t off) {
    if (off + 4 > b.size()) throw std::runtime_error(fmt::format("{}: truncated IDX header at byte {}", path, off));
    return (uint32_t(b[off]) << 24) | (uint32_t(b[off + 1]) << 16) | (uint32_t(b[off + 2]) << 8) | uint32_t(b[off + 3]);
  };
  uint32_t magic = be32(0);
  if ((magic >> 8) != 0x08)
    throw std::runtime_error(fmt::format("{}: byte 0: expected IDX uint8 magic 0x000008xx, got 0x{:08x}", path, magic));
  int nd = static_cast<int>(magic & 0xff);
  if (nd < 1 || nd > 4) throw std::runtime_error(fmt::format("{}: byte 3: bad IDX rank {}", path, nd));
  dims->clear();
  size_t total = 1;
  for (int i = 0; i < nd; ++i) {
    dims->push_back(static_cast<int>(be32(4 + 4 * i)));
    total *= static_cast<size_t>(dims->back());
  }
  size_t off = 4 + 4 * static_cast<size_t>(nd);
  if (b.size() != off + total)
    throw std::runtime_error(fmt::format("{}: byte {}: expected {} data bytes, file has {}", path, off, total,
                                         b.size() - off));
  return std::vector<uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(off), b.end());
}

ImageSet load_fashion_mnist(const std::string& dir) {
  ImageSet s;
  std::vector<int> d;
  auto f = [&](const char* name) {
    std::string p = dir + "/" + name;
    if (!fs::exists(p) && fs::exists(p.substr(0, p.size() - 3))) p = p.substr(0, p.size() - 3);
    return p;
  };
  s.train_images = read_idx(f("train-images-idx3-ubyte.gz"), &d);
  if (d.size() != 3) throw std::runtime_error(dir + ": train images: expected 3 dims");
  s.rows = d[1];
  s.cols = d[2];
  s.train_labels = read_idx(f("train-labels-idx1-ubyte.gz"), &d);
  s.eval_images = read_idx(f("t10k-images-idx3-ubyte.gz"), &d);
  s.eval_labels = read_idx(f("t10k-labels-idx1-ubyte.gz"), &d);
  if (s.train_images.size() != s.train_labels.size() * static_cast<size_t>(s.rows * s.cols) ||
      s.eval_images.size() != s.eval_labels.size() * static_cast<size_t>(s.rows * s.cols))
    throw std::runtime_error(dir + ": image and label counts differ");
  return s;
}

}  // namespace flatline
