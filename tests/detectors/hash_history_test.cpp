// HashHistory (detectors/hash_history.h) against a plain model of what it promises: the last `cap`
// distinct tags in insertion order with the step each was first seen at, forgotten oldest first, and a
// resume's forget_after. Every answer of a long random run must match, through growth, eviction and
// removals that undo the buckets' spill counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>

#include "detectors/hash_history.h"

namespace flatline::detail {
namespace {

class Model {
 public:
  explicit Model(size_t cap) : cap_(cap) {}
  std::optional<int64_t> find(uint32_t t) const {
    auto it = first_.find(t);
    return it == first_.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::pair<int64_t, bool> find_or_insert(uint32_t t, int64_t step) {
    if (auto f = find(t)) return {*f, false};
    if (order_.size() == cap_) {
      first_.erase(order_.front());
      order_.pop_front();
      evicted_ = true;
    }
    order_.push_back(t);
    first_[t] = step;
    return {step, true};
  }
  size_t forget_after(int64_t step) {
    std::deque<uint32_t> kept;
    for (uint32_t t : order_)
      if (first_[t] <= step) kept.push_back(t);
      else first_.erase(t);
    const size_t gone = order_.size() - kept.size();
    order_ = kept;
    return gone;
  }
  size_t size() const { return order_.size(); }
  bool evicted() const { return evicted_; }

 private:
  size_t cap_;
  std::deque<uint32_t> order_;
  std::map<uint32_t, int64_t> first_;
  bool evicted_ = false;
};

uint64_t next(uint64_t& s) {
  s += 0x9e3779b97f4a7c15ULL;
  uint64_t z = s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

TEST(HashHistory, MatchesTheModelThroughGrowthEvictionAndResumes) {
  for (size_t cap : {1, 7, 64, 1000}) {
    HashHistory h(cap);
    Model m(cap);
    uint64_t seed = cap;
    int64_t step = 0;
    // hashes from a pool four times the capacity: repeats, forgotten ones and new ones all happen
    const uint64_t pool = 4 * cap + 3;
    for (int op = 0; op < 40000; ++op) {
      const uint64_t x = next(seed);
      const uint64_t hash = (x % pool) * 0x2545F4914F6CDD1DULL;
      const uint32_t t = HashHistory::tag_of(hash);
      if (x % 997 == 0 && step > 10) {  // a resume some steps back
        const int64_t to = step - static_cast<int64_t>(x % 10);
        ASSERT_EQ(h.forget_after(to), m.forget_after(to)) << "cap " << cap << " op " << op;
        step = to;
        continue;
      }
      step += 1 + static_cast<int64_t>((x >> 20) % 2);
      if (x % 5 == 0) {
        EXPECT_EQ(h.find(hash, step), m.find(t)) << "cap " << cap << " op " << op;
      } else {
        ASSERT_EQ(h.find_or_insert(hash, step), m.find_or_insert(t, step)) << "cap " << cap << " op " << op;
      }
      ASSERT_EQ(h.size(), m.size());
      ASSERT_EQ(h.evicted(), m.evicted());
    }
  }
}

TEST(HashHistory, StepsRestoredFromTheirLowBitsAcross2To32) {
  HashHistory h(16);
  const int64_t far = (int64_t{1} << 32) + 5;
  h.find_or_insert(11, far);
  EXPECT_EQ(h.find(11, far + 1000), far);
  EXPECT_EQ(h.find_or_insert(11, far + 7), std::make_pair(far, false));
}

}  // namespace
}  // namespace flatline::detail
