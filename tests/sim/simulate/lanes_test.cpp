// The simulator's per-rank draws and batch hashes of a whole step (sim/simulate/lanes.h) give the bits
// of the scalar definitions they replace (model.h's gauss/unif of draw, run/sampler.h's XXH3 batch_hash),
// on whatever path the CPU takes, at every length (the four-lane body and the remainder).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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

// The draws put to use in the same pass are the two steps' values: (a (q + b g)) c and a + b u, each
// operation rounded on its own (no fused multiply-add), at every length.
TEST(Lanes, NoiseAndOffsetDrawsAreTheirFormulasBitForBit) {
  const Noise f{300.0, 1.0009765625, 0.02, 1.3};
  const Offset o{1234.5678, 1e-4};
  for (const size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{7}, size_t{1025}}) {
    const uint64_t key = step_key(777, 1, 4242);
    std::vector<double> g(n), u(n);
    gauss_draws(key, 3, n, f, g.data());
    unif_draws(key, 3, n, o, u.data());
    for (size_t i = 0; i < n; ++i) {
      const int64_t r = 3 + static_cast<int64_t>(i);
      volatile double bg = 0.02 * gauss(draw(key, r));  // volatile: each operation rounded apart
      volatile double sum = 1.0009765625 + bg;
      volatile double prod = 300.0 * sum;
      EXPECT_EQ(g[i], prod * 1.3) << "n " << n << " rank " << r;
      volatile double bu = 1e-4 * unif(draw(key, r));
      EXPECT_EQ(u[i], 1234.5678 + bu) << "n " << n << " rank " << r;
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

// The ranks with a heartbeat due are those with t < until, ascending, whatever the length (the groups of
// eight and the remainder) and with times equal to `until` (not due) and NaN (never due).
TEST(Lanes, DueRanksAreTheRanksBeforeUntil) {
  uint64_t x = 7;
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{17}, size_t{1025}}) {
    std::vector<double> t(n);
    for (size_t r = 0; r < n; ++r) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint64_t kind = x >> 61;  // 0..7
      t[r] = kind == 0 ? 10.0 : kind == 1 ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(x >> 40) / (1 << 20);
    }
    std::vector<uint32_t> out(n + 8, 0xdeadbeef);
    const size_t k = due_ranks(t.data(), n, 10.0, out.data());
    std::vector<uint32_t> want;
    for (size_t r = 0; r < n; ++r)
      if (t[r] < 10.0) want.push_back(static_cast<uint32_t>(r));
    ASSERT_EQ(k, want.size()) << "n " << n;
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(out[i], want[i]) << "n " << n << " i " << i;
  }
}

// lanes_max is its four-lane definition bit for bit (which of -0 and +0, NaNs skipped) at every length.
TEST(Lanes, LanesMaxIsTheFourLaneSelect) {
  uint64_t x = 11;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}, size_t{9}, size_t{15}, size_t{1025}}) {
    for (int rep = 0; rep < 64; ++rep)  // NaNs and zeros in every lane position, often
    for (const double init : {0.0, -0.0, -1e300}) {
      std::vector<double> v(n);
      for (auto& e : v) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const uint64_t kind = x >> 61;  // 0..7
        e = kind == 0 ? nan : kind == 1 ? 0.0 : kind == 2 ? -0.0 : static_cast<double>(static_cast<int64_t>(x >> 20) - (1LL << 43));
      }
      // the definition, lane by lane: a later value replaces the lane's only when strictly above it
      const auto take = [](double m, double x) { return !std::isnan(x) && x > m ? x : m; };
      const size_t body = n - n % 4;
      double want = init;
      for (size_t i = 0; i < body; i += 4) want = take(want, v[i]);  // lane 0
      for (size_t i = body; i < n; ++i) want = take(want, v[i]);     // and the remainder
      for (size_t k = 1; k < 4; ++k) {
        double lane = init;
        for (size_t i = k; i < body; i += 4) lane = take(lane, v[i]);
        want = take(want, lane);
      }
      const double got = lanes_max(init, v.data(), n);
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << "n " << n;
      EXPECT_EQ(got, want) << "n " << n;
    }
  }
}

// Every rank's batch hash of a global batch, made from the permutation in registers, is batch_hash of the
// ids FleetSampler gives that rank: every batch length (the eight-rank groups for 3..16 ids, rank by rank
// otherwise), group remainders, epochs (keys), and shifts from the dataset sizes of 1..70 ranks.
TEST(Lanes, SamplerBatchHashesAreXxh3OfEachRanksIds) {
  for (const int m : {1, 2, 3, 4, 5, 8, 13, 16, 17, 40}) {
    for (const int world : {1, 7, 8, 9, 24, 70}) {
      const FleetSampler smp(world, m, 1234u + static_cast<uint64_t>(m));
      ASSERT_TRUE(smp.fits32());
      for (const int64_t index : {int64_t{0}, int64_t{5}, smp.per_epoch - 1, 3 * smp.per_epoch + 2}) {
        uint32_t first = 0;
        const Permutation32 p = smp.permutation32(index, &first);
        std::vector<uint64_t> out(static_cast<size_t>(world));
        sampler_batch_hashes(p, first, m, out.size(), out.data());
        std::vector<int64_t> ids(static_cast<size_t>(m));
        for (int r = 0; r < world; ++r) {
          smp.ids(index, r, ids.data());
          EXPECT_EQ(out[static_cast<size_t>(r)], batch_hash(ids)) << "m " << m << " world " << world << " rank " << r
                                                                  << " index " << index;
        }
      }
    }
  }
}

// The 32-bit permutation wraps mod 2^32 as the 64-bit definition does under a mask of 2^32 - 1: positions
// and keys with their top bits set, against ids computed in 64 bits.
TEST(Lanes, SamplerBatchHashesAtTheTopOfThe32BitRange) {
  const Permutation32 p{0x9e3779b9u, 0xdeadbeefu, 0x85ebca6bu, 0xffffffffu, 16};
  const int m = 16;
  const size_t ranks = 13;
  const uint32_t first = 0xffffffffu - 100;  // positions wrap past 2^32
  std::vector<uint64_t> out(ranks);
  sampler_batch_hashes(p, first, m, ranks, out.data());
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<int64_t> ids;
    for (int k = 0; k < m; ++k) {
      const uint64_t pos = (uint64_t{first} + r * m + static_cast<uint64_t>(k)) & 0xffffffffu;
      const uint64_t x = (uint64_t{p.a} * pos + p.b) & 0xffffffffu;
      ids.push_back(static_cast<int64_t>((uint64_t{p.c} * (x ^ (x >> p.shift))) & 0xffffffffu));
    }
    EXPECT_EQ(out[r], batch_hash(ids)) << "rank " << r;
  }
}

}  // namespace
}  // namespace flatline::simdetail
