// The distributed sampler: disjoint, complete shards over an epoch; deterministic; resumable.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "run/sampler.h"

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

// Another world size continues the same permutation after the same samples (run/sampler.h reshard).
TEST(Sampler, ReshardContinuesAfterTheSameSamplesOrRefuses) {
  const int64_t n = 1000;
  DistributedSampler two0(n, 2, 0, 4, 1, 9), two1(n, 2, 1, 4, 1, 9);
  std::set<int64_t> trained;
  for (int i = 0; i < 10; ++i) {
    for (auto id : two0.next()) trained.insert(id);
    for (auto id : two1.next()) trained.insert(id);
  }
  const auto one = reshard(two0.state(), n, 2, 1, 4);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->epoch, 0);
  EXPECT_EQ(one->position, 20);  // 10 batches of 8 = 20 of 4
  DistributedSampler single(n, 1, 0, 4, 1, 9);
  single.set_state(*one);
  for (int i = 0; i < 20; ++i)
    for (auto id : single.next()) EXPECT_EQ(trained.count(id), 0u) << "sample " << id << " trained twice";
  EXPECT_FALSE(reshard(two0.state(), n, 2, 3, 4));  // 80 samples are not whole batches of 12
  EXPECT_EQ(reshard(two0.state(), n, 2, 4, 4)->position, 5);
  // the end of an epoch: what is left is the dropped tail, so the next epoch starts
  EXPECT_EQ(reshard(SamplerState{2, 124}, n, 1, 2, 4)->epoch, 2);
  EXPECT_EQ(reshard(SamplerState{2, 124}, n, 1, 2, 4)->position, 62);
  // 90 of 100 samples consumed; the new epoch is 3 batches of 30 (90): all of them done
  EXPECT_EQ(reshard(SamplerState{0, 9}, 100, 1, 3, 10)->epoch, 1);
  EXPECT_EQ(reshard(SamplerState{0, 9}, 100, 1, 3, 10)->position, 0);
  EXPECT_FALSE(reshard(SamplerState{0, 1}, 10, 1, 4, 4));  // a global batch larger than the data
}

}  // namespace flatline
