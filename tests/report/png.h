// A minimal PNG reader for the report's screenshot test: 8-bit RGB or RGBA, non-interlaced (what
// headless Chromium writes), decoded with zlib, every row filter undone. Pixels come back as RGB.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace flatline::testing {

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
};

inline Image read_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (b.size() < 8 || b[1] != 'P' || b[2] != 'N' || b[3] != 'G') throw std::runtime_error(path + ": not a PNG");
  auto be32 = [&](size_t i) { return uint32_t(b[i]) << 24 | uint32_t(b[i + 1]) << 16 | uint32_t(b[i + 2]) << 8 | b[i + 3]; };
  Image img;
  int channels = 0;
  std::vector<uint8_t> z;
  for (size_t i = 8; i + 8 <= b.size();) {
    const uint32_t len = be32(i);
    const std::string type(b.begin() + i + 4, b.begin() + i + 8);
    if (type == "IHDR") {
      img.width = be32(i + 8), img.height = be32(i + 12);
      if (b[i + 16] != 8 || (b[i + 17] != 2 && b[i + 17] != 6) || b[i + 20] != 0)
        throw std::runtime_error(path + ": only 8-bit RGB/RGBA, non-interlaced");
      channels = b[i + 17] == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      z.insert(z.end(), b.begin() + i + 8, b.begin() + i + 8 + len);
    }
    i += 12 + len;
  }
  const size_t stride = size_t(img.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf n = raw.size();
  if (!channels || uncompress(raw.data(), &n, z.data(), z.size()) != Z_OK || n != raw.size())
    throw std::runtime_error(path + ": bad image data");
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.reserve(size_t(img.width) * img.height * 3);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t ft = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(channels) ? cur[x - channels] : 0, up = prev[x],
                c = x >= size_t(channels) ? prev[x - channels] : 0;
      int p = a + up - c, pa = std::abs(p - a), pb = std::abs(p - up), pc = std::abs(p - c);
      const int pred = ft == 0 ? 0 : ft == 1 ? a : ft == 2 ? up : ft == 3 ? (a + up) / 2
                     : (pa <= pb && pa <= pc ? a : pb <= pc ? up : c);
      cur[x] = uint8_t(in[x] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x)
      for (int k = 0; k < 3; ++k) img.rgb.push_back(cur[x * channels + k]);
    std::swap(prev, cur);
  }
  return img;
}

}  // namespace flatline::testing
