// The simulator's per-rank draws and batch hashes of a whole step (sim/simulate/lanes.h) give the bits
// of the scalar definitions they replace (model.h's gauss/unif of draw, run/sampler.h's XXH3 batch_hash),
// on whatever path the CPU takes, at every length (the four-lane body and the remainder).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "run/sampler.h"
#include "sim/simulate/lanes.h"
#include "sim/simulate/model.h"

namespace flatline::simdetail {
namespace {

TEST(Lanes, DrawsAreTheScalarOnesBitForBit) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{7}, size_t{1025}}) {
    for (const int64_t first : {int64_t{0}, int64_t{5}, int64_t{1} << 20}) {
      const uint64_t key = step_key(12345, 3, 777);
      std::vector<double> g(n), u(n);
      gauss_draws(key, first, n, g.data());
      unif_draws(key, first, n, u.data());
      for (size_t i = 0; i < n; ++i) {
        const int64_t r = first + static_cast<int64_t>(i);
        EXPECT_EQ(g[i], gauss(draw(key, r))) << "n " << n << " rank " << r;
        EXPECT_EQ(u[i], unif(draw(key, r))) << "n " << n << " rank " << r;
      }
    }
  }
}

TEST(Lanes, BatchHashesAreXxh3OfEachBatch) {
  uint64_t x = 99;
  for (const int m : {1, 2, 3, 4, 8, 13, 16, 17, 40}) {  // 8..320 bytes: every XXH3 length class
    for (const size_t lanes : {size_t{1}, size_t{4}, size_t{6}, size_t{33}}) {
      std::vector<int64_t> ids(static_cast<size_t>(m) * lanes);
      for (auto& id : ids) id = static_cast<int64_t>((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 20);
      std::vector<uint64_t> out(lanes);
      batch_hashes(ids.data(), m, lanes, out.data());
      for (size_t j = 0; j < lanes; ++j) {
        std::vector<int64_t> one;
        for (int k = 0; k < m; ++k) one.push_back(ids[static_cast<size_t>(k) * lanes + j]);
        EXPECT_EQ(out[j], batch_hash(one)) << "m " << m << " lane " << j;
      }
    }
  }
}

}  // namespace
}  // namespace flatline::simdetail
