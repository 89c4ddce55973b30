// HashHistory: the batch hashes one rank has trained on, each with the step it was first seen at,
// for data_replay. Bounded: it keeps the most recent `cap` distinct hashes (the oldest is forgotten
// first), so 1024 ranks x 100k steps stay within memory.
// A slot is 8 bytes, because at fleet scale (1024 ranks) cache misses on these tables dominate the
// detector's time: the high 32 bits of the mixed hash as its tag (a false match of two different
// batches is ~1e-9 per lookup at 4096 entries and data_replay needs 2 repeats in 3 records) and the low
// 32 bits of the step, restored against the current step (exact within 2^31 steps).
// Layout: buckets of kWays slots (64 bytes, one cache line: the 8 tags, then the 8 steps, so that one
// AVX2 compare looks at a whole bucket), a tag's home bucket derived from it, linear probing from bucket
// to bucket. An entry never moves once placed, so the insertion-order ring holds
// slot positions and forgetting the oldest is one store; each bucket counts the entries that were
// placed past it while it was full (spill), so a lookup stops at the first bucket that has none, and a
// removal undoes its counts. The table is at most half full: it starts with room for min(cap, 4096)
// entries and doubles when it needs more.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace flatline::detail {

class HashHistory {
 public:
  explicit HashHistory(std::size_t cap = 1 << 16) : cap_(cap < 1 ? 1 : cap) {}
  std::size_t size() const { return count_; }

  // The tag a hash is looked up by (its high 32 bits after mixing, never 0): a row that looks in
  // several tables mixes its hash once.
  // Mixed first (MurmurHash3's fmix64, a bijection): logs from elsewhere may carry hashes that are not
  // well spread (small integers, sample ids), whose high 32 bits would all be equal.
  static uint32_t tag_of(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    const auto t = static_cast<uint32_t>(h >> 32);
    return t ? t : 1u;
  }

  // A resume from the checkpoint of step `step`: the steps after it were rolled back, so the batches
  // first seen after it are forgotten (the re-run steps train them again, by design, and possibly at
  // other step numbers: a resume at another world size re-shards them). Returns how many went.
  std::size_t forget_after(int64_t step) {
    if (count_ == 0) return 0;
    std::vector<Entry> kept;  // oldest first
    kept.reserve(count_);
    for (std::size_t k = 0; k < count_; ++k) {
      const Entry e = entry(ring_[(head_ + k) % ring_.size()]);
      if (first_step(e.step, step) <= step) kept.push_back(e);
    }
    const std::size_t gone = count_ - kept.size();
    rebuild(kept, buckets_.size());
    return gone;
  }

  // The step `h` was first seen at, if it is known (nothing is remembered).
  std::optional<int64_t> find(uint64_t h, int64_t step) const { return find_tag(tag_of(h), step); }
  std::optional<int64_t> find_tag(uint32_t t, int64_t step) const {
    if (count_ == 0) return std::nullopt;
    const std::size_t pos = lookup(t);
    if (pos == kNone) return std::nullopt;
    return first_step(buckets_[pos / kWays].step[pos % kWays], step);
  }
  // f(tag) for every tag it holds.
  template <class F>
  void for_each_tag(F f) const {
    for (std::size_t k = 0; k < count_; ++k) f(entry(ring_[(head_ + k) % ring_.size()]).tag);
  }
  // Whether it ever forgot its oldest to make room: from then on a hash it does not know may be old.
  bool evicted() const { return evicted_; }

  // The step `h` was first seen at and false when it is known; else remembers (h, step) and returns
  // (step, true).
  std::pair<int64_t, bool> find_or_insert(uint64_t h, int64_t step) { return find_or_insert_tag(tag_of(h), step); }
  __attribute__((always_inline)) std::pair<int64_t, bool> find_or_insert_tag(uint32_t t, int64_t step) {
    if (buckets_.empty()) return insert_slow(t, step);
    // The common case first: t's home bucket has no spill and a free slot, and the table needs no
    // growth; the oldest entry (when full) is forgotten before t takes a slot.
    const std::size_t b = home(t);
    Bucket& B = buckets_[b];
    if (const unsigned m = matches(B, t)) return {first_step(B.step[__builtin_ctz(m)], step), false};
    if (spill_[b] != 0 || (count_ != cap_ && (count_ + 1) * 2 > buckets_.size() * kWays)) return insert_slow(t, step);
    const uint32_t low = static_cast<uint32_t>(step);
    const bool full = count_ == cap_;
    if (full) {  // forget the oldest
      evicted_ = true;
      erase(ring_[head_]);
    }
    const unsigned free = matches(B, 0);
    if (!free) return full ? insert_evicted(t, low, step) : insert_slow(t, step);
    remember(take(B, b, free, t, low), full);
    return {step, true};
  }

  // Loads the cache line `t` would be found in (a pass over many ranks' rows asks first, then looks) and
  // returns its bucket for try_insert_new() (valid until the table next grows or is rebuilt); also the
  // lines an insert then touches: the bucket's spill count and, once full, the bucket of the oldest
  // entry, which it forgets (a second miss per new batch at fleet scale).
  std::size_t prefetch_home(uint32_t t) const {
    const std::size_t b = home(t);
    __builtin_prefetch(buckets_.data() + b);  // (no table yet: mask_ 0, a harmless prefetch of nothing)
    __builtin_prefetch(spill_.data() + b);
    if (count_ == cap_) __builtin_prefetch(buckets_.data() + ring_[head_] / kWays);
    return b;
  }

  // find_or_insert_tag(t, step) when t is new and takes a slot in its home bucket `b` (prefetch_home(t))
  // without growth: t is not in that bucket, nothing spilled past it, it has a free slot. Then it
  // remembers (t, step), forgetting the oldest when full, exactly as find_or_insert_tag() would, and
  // returns true; otherwise it changes nothing and returns false (find_or_insert_tag() decides). One test
  // per condition: the common case at fleet scale, a batch never seen.
  __attribute__((always_inline)) bool try_insert_new(std::size_t b, uint32_t t, int64_t step) {
    if (buckets_.empty()) return false;
    Bucket& B = buckets_[b];
    if (matches(B, t) | spill_[b]) return false;
    const bool full = count_ == cap_;
    // (when full, forgetting the oldest might free a slot here: the general path's case)
    if (!matches(B, 0) || (!full && (count_ + 1) * 2 > (mask_ + 1) * kWays)) return false;
    if (full) {
      evicted_ = true;
      erase(ring_[head_]);
    }
    remember(take(B, b, matches(B, 0), t, static_cast<uint32_t>(step)), full);
    return true;
  }

 private:
  static constexpr std::size_t kWays = 8, kMinBuckets = 8, kStartEntries = 4096, kNone = ~std::size_t{0};
  struct alignas(64) Bucket {
    uint32_t tag[kWays] = {};   // 0: empty
    uint32_t step[kWays] = {};  // low 32 bits of the first step
  };
  struct Entry {
    uint32_t tag, step;
  };

  // A first step restored from its low 32 bits against `step` (exact within 2^31 steps).
  static int64_t first_step(uint32_t low, int64_t step) {
    return step - static_cast<int32_t>(static_cast<uint32_t>(step) - low);
  }
  // t, first seen at `low`, takes bucket b's first free slot (`free`: matches(B, 0), not 0); its position.
  __attribute__((always_inline)) static uint32_t take(Bucket& B, std::size_t b, unsigned free, uint32_t t,
                                                      uint32_t low) {
    const std::size_t k = static_cast<std::size_t>(__builtin_ctz(free));
    B.tag[k] = t, B.step[k] = low;
    return static_cast<uint32_t>(b * kWays + k);
  }
  // The entry at `pos` is the newest: it takes the ring place of the oldest, forgotten just before
  // (`replacing`), or is appended to the ring.
  __attribute__((always_inline)) void remember(uint32_t pos, bool replacing) {
    if (replacing) {
      ring_[head_] = pos;
      head_ = head_ + 1 == cap_ ? 0 : head_ + 1;
    } else {
      ring_.push_back(pos);
    }
    ++count_;
  }
  Entry entry(std::size_t pos) const { return {buckets_[pos / kWays].tag[pos % kWays], buckets_[pos / kWays].step[pos % kWays]}; }
  // find_or_insert_tag() for t not in the table, in general (a chain of buckets, growth, the first).
  __attribute__((noinline)) std::pair<int64_t, bool> insert_slow(uint32_t t, int64_t step) {
    if (buckets_.empty()) rebuild({}, start_buckets());
    if (const std::size_t pos = lookup(t); pos != kNone)
      return {first_step(buckets_[pos / kWays].step[pos % kWays], step), false};
    const Entry e{t, static_cast<uint32_t>(step)};
    if (count_ == cap_) {  // forget the oldest
      evicted_ = true;
      erase(ring_[head_]);
      return insert_evicted(t, e.step, step);
    }
    if ((count_ + 1) * 2 > buckets_.size() * kWays) grow();
    remember(static_cast<uint32_t>(place(e)), false);
    return {step, true};
  }
  // The oldest is forgotten already: t takes a slot, the ring its place.
  __attribute__((noinline)) std::pair<int64_t, bool> insert_evicted(uint32_t t, uint32_t low, int64_t step) {
    remember(static_cast<uint32_t>(place({t, low})), true);
    return {step, true};
  }
  // Room for min(cap, kStartEntries) at the start: no growth at all at fleet scale (1024 entries a rank
  // at 1024 ranks), a small table where the cap is large (a few ranks) until the run needs more.
  std::size_t start_buckets() const {
    std::size_t n = kMinBuckets;
    while (n * kWays < 2 * std::min(cap_, kStartEntries)) n *= 2;
    return n;
  }
  std::size_t home(uint32_t t) const { return static_cast<std::size_t>((t * 0x9e3779b97f4a7c15ULL) >> 24) & mask_; }
  // Bit k set where bucket b's tag k is t.
  static unsigned matches(const Bucket& b, uint32_t t) {
#ifdef __AVX2__
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(b.tag));
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, _mm256_set1_epi32(static_cast<int>(t))))));
#else
    unsigned m = 0;
    for (std::size_t k = 0; k < kWays; ++k) m |= static_cast<unsigned>(b.tag[k] == t) << k;
    return m;
#endif
  }
  std::size_t lookup(uint32_t t) const {
    for (std::size_t b = home(t);; b = (b + 1) & mask_) {
      if (const unsigned m = matches(buckets_[b], t)) return b * kWays + static_cast<std::size_t>(__builtin_ctz(m));
      if (spill_[b] == 0) return kNone;
    }
  }
  // Into the first free slot from its home bucket on; each full bucket passed counts it.
  std::size_t place(Entry e) {
    for (std::size_t b = home(e.tag);; b = (b + 1) & mask_) {
      if (const unsigned m = matches(buckets_[b], 0)) {
        const std::size_t k = static_cast<std::size_t>(__builtin_ctz(m));
        buckets_[b].tag[k] = e.tag;
        buckets_[b].step[k] = e.step;
        return b * kWays + k;
      }
      ++spill_[b];
    }
  }
  void erase(std::size_t pos) {
    const std::size_t at = pos / kWays;
    uint32_t& tag = buckets_[at].tag[pos % kWays];
    for (std::size_t b = home(tag); b != at; b = (b + 1) & mask_) --spill_[b];
    tag = 0;
    --count_;
  }
  void grow() {
    std::vector<Entry> kept;
    kept.reserve(count_);
    for (std::size_t k = 0; k < count_; ++k) kept.push_back(entry(ring_[(head_ + k) % ring_.size()]));
    rebuild(kept, buckets_.size() * 2);
  }
  // The table of `n` buckets (more if they would be over half full) holding `kept`, oldest first.
  void rebuild(const std::vector<Entry>& kept, std::size_t n) {
    while (n * kWays < kept.size() * 2) n *= 2;
    buckets_.assign(n, Bucket{});
    spill_.assign(n, 0);
    mask_ = n - 1;
    ring_.clear();
    ring_.reserve(std::max(kept.size(), std::min(cap_, kStartEntries)));
    head_ = 0;
    for (const Entry& e : kept) ring_.push_back(static_cast<uint32_t>(place(e)));
    count_ = kept.size();
  }

  std::size_t cap_, count_ = 0, head_ = 0, mask_ = 0;
  bool evicted_ = false;
  std::vector<Bucket> buckets_;
  std::vector<uint32_t> spill_;  // per bucket: entries placed past it while it was full
  std::vector<uint32_t> ring_;   // slot positions in insertion order (the oldest at head_ once full)
};

}  // namespace flatline::detail
