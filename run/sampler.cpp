#include "run/sampler.h"

#include <stdexcept>

namespace flatline {
namespace {
// splitmix64 stream: a platform-independent generator (std::shuffle's algorithm is unspecified).
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};
}  // namespace

DistributedSampler::DistributedSampler(int64_t n, int world, int rank, int batch, int accum, uint64_t seed)
    : n_(n), world_(world), rank_(rank), batch_(batch), accum_(accum), seed_(seed) {
  const int64_t global = int64_t{world} * batch * accum;
  if (rank < 0 || rank >= world) throw std::invalid_argument("sampler: rank outside world size");
  steps_per_epoch_ = n / global;
  if (steps_per_epoch_ < 1)
    throw std::invalid_argument("sampler: dataset of " + std::to_string(n) + " samples is smaller than one global batch of " +
                                std::to_string(global));
}

const std::vector<int64_t>& DistributedSampler::permutation(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    perm_.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) perm_[static_cast<size_t>(i)] = i;
    SplitMix rng{seed_ * 0x100000001b3ULL + static_cast<uint64_t>(epoch)};
    for (int64_t i = n_ - 1; i > 0; --i) {  // Fisher-Yates
      int64_t j = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(i + 1));
      std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(j)]);
    }
    cached_epoch_ = epoch;
  }
  return perm_;
}

std::vector<int64_t> DistributedSampler::at(int64_t index) const {
  const int64_t epoch = index / steps_per_epoch_, pos = index % steps_per_epoch_;
  const auto& p = permutation(epoch);
  const int64_t per_rank = int64_t{batch_} * accum_;
  const int64_t start = pos * per_rank * world_ + rank_ * per_rank;
  return std::vector<int64_t>(p.begin() + start, p.begin() + start + per_rank);
}

std::vector<int64_t> DistributedSampler::next() {
  auto ids = at(state_.epoch * steps_per_epoch_ + state_.position);
  if (++state_.position == steps_per_epoch_) {
    state_.position = 0;
    ++state_.epoch;
  }
  return ids;
}

std::optional<SamplerState> reshard(SamplerState s, int64_t n, int old_world, int new_world, int per_rank) {
  const int64_t old_global = int64_t{old_world} * per_rank, new_global = int64_t{new_world} * per_rank;
  if (old_global <= 0 || new_global <= 0 || new_global > n) return std::nullopt;
  const int64_t consumed = s.position * old_global;
  if (consumed % new_global != 0) return std::nullopt;
  SamplerState out{s.epoch, consumed / new_global};
  if (out.position >= n / new_global) out = {s.epoch + 1, 0};
  return out;
}

}  // namespace flatline
