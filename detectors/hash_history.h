// HashHistory: the batch hashes one rank has trained on, each with the step it was first seen at,
// for data_replay. Bounded: it keeps the most recent `cap` distinct hashes (the oldest is forgotten
// first), so 1024 ranks x 100k steps stay within memory. Open addressing with linear probing and
// backward-shift deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R): no allocation per record; the
// table doubles while it is below 2 x cap slots, starting small so short runs stay small.
// A slot is 8 bytes, because at fleet scale (1024 ranks) cache misses on these tables dominate the
// detector suite's time: the high 32 bits of the mixed hash as its tag (the slot index is derived from the tag;
// a false match of two different batches is ~1e-9 per lookup at 4096 entries and data_replay needs
// 2 repeats in 3 records) and the low 32 bits of the step, restored against the current step (exact
// within 2^31 steps).
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace flatline::detail {

class HashHistory {
 public:
  explicit HashHistory(std::size_t cap = 1 << 16) : cap_(cap < 1 ? 1 : cap) {}
  std::size_t size() const { return count_; }

  // A resume from the checkpoint of step `step`: the steps after it were rolled back, so the batches
  // first seen after it are forgotten (the re-run steps train them again, by design, and possibly at
  // other step numbers: a resume at another world size re-shards them). Returns how many went.
  std::size_t forget_after(int64_t step) {
    if (count_ == 0) return 0;
    std::vector<Slot> kept;  // oldest first
    kept.reserve(count_);
    const std::size_t n = ring_.size();
    for (std::size_t k = 0; k < n; ++k) {
      const uint32_t t = ring_[(head_ + k) % n];
      const std::size_t i = slot_of(t);
      if (empty(i)) continue;
      const int64_t first = first_step(i, step);
      if (first <= step) kept.push_back(slots_[i]);
    }
    const std::size_t gone = count_ - kept.size();
    std::fill(slots_.begin(), slots_.end(), Slot{});
    ring_.clear();
    head_ = count_ = 0;
    for (const Slot& k : kept) {
      slots_[slot_of(k.tag)] = k;
      ring_.push_back(k.tag);
      ++count_;
    }
    return gone;
  }

  // The step `h` was first seen at, if it is known (nothing is remembered).
  std::optional<int64_t> find(uint64_t h, int64_t step) const {
    if (slots_.empty()) return std::nullopt;
    const std::size_t i = slot_of(tag(h));
    if (empty(i)) return std::nullopt;
    return first_step(i, step);
  }
  // Whether it ever forgot its oldest to make room: from then on a hash it does not know may be old.
  bool evicted() const { return evicted_; }

  // The step `h` was first seen at and false when it is known; else remembers (h, step) and returns
  // (step, true).
  std::pair<int64_t, bool> find_or_insert(uint64_t h, int64_t step) {
    if (slots_.empty()) resize(64);
    const uint32_t t = tag(h);
    std::size_t i = slot_of(t);
    if (!empty(i)) return {first_step(i, step), false};
    if (count_ == cap_) {  // forget the oldest
      evicted_ = true;
      erase(ring_[head_]);
      ring_[head_] = t;
      head_ = (head_ + 1) % cap_;
      i = slot_of(t);
    } else {
      ring_.push_back(t);
      if ((count_ + 1) * 2 > slots_.size()) {
        resize(slots_.size() * 2);
        i = slot_of(t);
      }
    }
    slots_[i] = {t, static_cast<uint32_t>(step)};
    ++count_;
    return {step, true};
  }

 private:
  struct Slot {
    uint32_t tag = 0;   // 0: empty
    uint32_t step = 0;  // low 32 bits of the first step
  };
  // Mixed first (MurmurHash3's fmix64, a bijection): logs from elsewhere may carry hashes that are
  // not well spread (small integers, sample ids), whose high 32 bits would all be equal.
  static uint32_t tag(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    const auto t = static_cast<uint32_t>(h >> 32);
    return t ? t : 1u;
  }
  // Slot i's first step, restored from its low 32 bits against `step` (exact within 2^31 steps).
  int64_t first_step(std::size_t i, int64_t step) const {
    return step - static_cast<int32_t>(static_cast<uint32_t>(step) - slots_[i].step);
  }
  std::size_t ideal(uint32_t t) const { return static_cast<std::size_t>((t * 0x9e3779b97f4a7c15ULL) >> 24) & mask_; }
  bool empty(std::size_t i) const { return slots_[i].tag == 0; }
  std::size_t slot_of(uint32_t t) const {  // t's slot, or the empty slot where it would go
    std::size_t i = ideal(t);
    while (!empty(i) && slots_[i].tag != t) i = (i + 1) & mask_;
    return i;
  }
  void resize(std::size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    for (const Slot& s : old)
      if (s.tag) slots_[slot_of(s.tag)] = s;
  }
  void erase(uint32_t t) {
    std::size_t i = slot_of(t);
    if (empty(i)) return;
    for (std::size_t j = (i + 1) & mask_; !empty(j); j = (j + 1) & mask_) {
      const std::size_t k = ideal(slots_[j].tag);
      const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);  // k in (i, j] cyclically
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --count_;
  }

  std::size_t cap_, count_ = 0, head_ = 0, mask_ = 0;
  bool evicted_ = false;
  std::vector<Slot> slots_;
  std::vector<uint32_t> ring_;  // tags in insertion order, for forgetting the oldest
};

}  // namespace flatline::detail
