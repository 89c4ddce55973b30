// The distributed sampler: disjoint, complete shards over an epoch; deterministic; resumable.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "sim/sampler.h"

namespace flatline {

TEST(Sampler, ShardsAreDisjointAndCompleteOverAnEpoch) {
  const int64_t n = 1000;
  const int world = 3, batch = 7, accum = 2;  // global batch 42: 23 steps, 34 ids dropped
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(n, world, r, batch, accum, 5);
  EXPECT_EQ(ranks[0].steps_per_epoch(), 23);
  std::set<int64_t> seen;
  size_t total = 0;
  for (int64_t step = 0; step < 23; ++step)
    for (auto& s : ranks) {
      auto ids = s.next();
      ASSERT_EQ(ids.size(), static_cast<size_t>(batch * accum));
      total += ids.size();
      seen.insert(ids.begin(), ids.end());
    }
  EXPECT_EQ(total, 23u * 42u);
  EXPECT_EQ(seen.size(), total);  // disjoint
  EXPECT_EQ(*seen.begin(), *std::min_element(seen.begin(), seen.end()));
  EXPECT_LE(*seen.rbegin(), n - 1);
  EXPECT_EQ(ranks[0].state().epoch, 1);
  EXPECT_EQ(ranks[0].state().position, 0);
}

TEST(Sampler, EpochsReshuffleAndSeedsDiffer) {
  DistributedSampler a(500, 2, 0, 10, 1, 1), b(500, 2, 0, 10, 1, 2);
  auto first = a.at(0), next_epoch = a.at(a.steps_per_epoch());
  EXPECT_NE(first, next_epoch);
  EXPECT_NE(first, b.at(0));
  DistributedSampler a2(500, 2, 0, 10, 1, 1);
  EXPECT_EQ(first, a2.at(0));
}

TEST(Sampler, ResumingFromAStateContinuesTheSameSequence) {
  DistributedSampler a(300, 2, 1, 8, 1, 9);
  for (int i = 0; i < 25; ++i) a.next();  // crosses the epoch boundary (18 steps per epoch)
  SamplerState st = a.state();
  EXPECT_EQ(st.epoch, 1);
  EXPECT_EQ(st.position, 7);
  std::vector<std::vector<int64_t>> rest;
  for (int i = 0; i < 5; ++i) rest.push_back(a.next());
  DistributedSampler b(300, 2, 1, 8, 1, 9);
  b.set_state(st);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.next(), rest[static_cast<size_t>(i)]);
}

TEST(Sampler, TooSmallADatasetIsAClearError) {
  EXPECT_THROW(DistributedSampler(10, 2, 0, 8, 1, 0), std::invalid_argument);
}

TEST(BatchHash, DependsOnIdsAndOrder) {
  EXPECT_EQ(batch_hash({1, 2, 3}), batch_hash({1, 2, 3}));
  EXPECT_NE(batch_hash({1, 2, 3}), batch_hash({3, 2, 1}));
  EXPECT_NE(batch_hash({1, 2, 3}), batch_hash({1, 2, 4}));
}

}  // namespace flatline
