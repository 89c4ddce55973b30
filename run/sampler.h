// DistributedSampler: which sample ids each rank trains on at each step. Deterministic and
// resumable: the state is (epoch, position) and the order of an epoch depends only on (seed, epoch),
// like torch.utils.data.DistributedSampler with shuffle=True, drop_last=True and set_epoch(epoch).
//
// One optimizer step consumes a global batch of world_size * batch_size * grad_accum ids from the
// epoch's permutation; rank r takes the r-th contiguous slice, micro-batch m the m-th sub-slice. The
// tail of an epoch shorter than a global batch is dropped, so every rank sees the same number of steps
// per epoch and shards are disjoint; over an epoch they cover the first floor(n / global) * global ids.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace flatline {

struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // global batches already consumed in this epoch
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, int batch_size, int grad_accum,
                     uint64_t seed);
  // The ids for this rank's next optimizer step: grad_accum * batch_size ids (micro-batch major).
  std::vector<int64_t> next();
  // The ids this rank would get for global batch `index` counted from the start of training
  // (index = steps since epoch 0 position 0); does not move the state.
  std::vector<int64_t> at(int64_t index) const;
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  SamplerState state() const { return state_; }
  void set_state(SamplerState s) { state_ = s; }

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  int64_t n_;
  int world_, rank_, batch_, accum_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  SamplerState state_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

// The state with which `new_world` ranks continue exactly where `old_world` ranks stopped (a resume
// under another world size): the same epoch, after the same samples of its permutation, which depends
// on (seed, epoch) only. nullopt when those samples are not a whole number of the new global batches
// (new_world x per_rank): continuing would then replay or skip data. A position that reaches the new
// epoch length moves to the next epoch (the rest is the dropped tail).
std::optional<SamplerState> reshard(SamplerState s, int64_t dataset_size, int old_world, int new_world, int per_rank);

// 64-bit xxHash (XXH3) of a batch's sample ids: the batch fingerprint in telemetry.
uint64_t batch_hash(const std::vector<int64_t>& ids);
uint64_t batch_hash(const int64_t* ids, size_t n);  // the same hash without a vector (fleet simulator)

}  // namespace flatline
