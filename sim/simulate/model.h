// The fleet simulator's stand-in for a model (simulator.h): seeded noise, the loss and gradient-norm
// curves of training progress, the fp16 underflow fraction, the default step time, the sampler's ids.
// Inline and allocation-free: these run once per rank per step (10^8 times for 1024 x 100k).
#pragma once
#include <cmath>
#include <cstdint>

#include "run/scenario.h"
#include "sim/simulate/lanes.h"

namespace flatline::simdetail {

// splitmix64 finaliser (Steele et al. 2014): platform-independent, unlike std:: distributions.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// One draw per (seed, stream, step, rank).
inline uint64_t key(uint64_t seed, uint64_t stream, int64_t step, int64_t rank) {
  return mix(seed ^ mix((stream << 56) ^ (static_cast<uint64_t>(step) << 20) ^ static_cast<uint64_t>(rank)));
}
// The same per-rank draws at a third of the cost, for the loops over every rank of a step: the
// (seed, stream, step) part once per step, then one finaliser per rank (splitmix64 over a counter).
inline uint64_t step_key(uint64_t seed, uint64_t stream, int64_t step) {
  return mix(seed ^ mix((stream << 56) ^ (static_cast<uint64_t>(step) << 20) ^ 0xfffffULL));
}
inline uint64_t draw(uint64_t step_key, int64_t rank) { return mix(step_key ^ static_cast<uint64_t>(rank)); }
inline double unif(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }
// Roughly standard normal: Irwin-Hall of the four 16-bit quarters of one hash (bounded at +-3.46).
inline double gauss(uint64_t h) {
  const double s = static_cast<double>((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48));
  return (s / 65536.0 - 2.0) * 1.7320508075688772;
}

// Loss of a byte-level LM against training progress p (applied updates at peak lr on fresh data):
// a power law to a floor, L(p) = floor + A (1 + p / tau)^-alpha (Kaplan et al. 2020, "Scaling laws",
// loss vs steps). Starts at ln 256 = 5.55 (uniform bytes); floor 1.3 nats; tau and alpha chosen so
// that a few thousand steps bring it near 2 and 100k steps still descend slowly.
constexpr double kLoss0 = 5.545, kLossFloor = 1.3, kTau = 150.0, kAlpha = 0.45;
inline double loss_at(double p) { return kLossFloor + (kLoss0 - kLossFloor) * std::pow(1.0 + p / kTau, -kAlpha); }
// Global gradient norm (after all-reduce, unscaled): large early, ~0.3 late (typical GPT logs).
inline double grad_norm_at(double p) { return 0.3 + 1.7 * std::pow(1.0 + p / kTau, -0.5); }
constexpr double kLocalOverGlobal = 1.4;  // a rank's own gradient is noisier than the average of W
constexpr double kMaxElemOverNorm = 64;   // largest gradient element / norm, for fp16 overflow
constexpr double kFp16Max = 65504.0, kFp16MinSubnormal = 5.96e-8;

// Fraction of fp16 gradient elements that underflow to 0 at loss scale `scale`: elements are
// log-normal (sigma 2 in ln) around scale x norm / 1000 (a norm spread over ~10^6 elements).
inline double underflow_fraction(double scale, double norm) {
  const double m = scale * norm / 1000.0;
  if (!(m > 0)) return 1.0;
  return 0.5 * std::erfc((std::log(m) - std::log(kFp16MinSubnormal)) / (2.0 * 1.4142135623730951));
}

inline double model_params(const ModelSpec& m) {
  if (m.kind == "cnn") return 1.0e5;
  return 12.0 * m.n_layer * m.n_embd * m.n_embd + (256.0 + m.block_size) * m.n_embd;
}

// Default compute ms per step: a few hundred ms, what large-model fleets log (Megatron-LM iteration
// times); --step-ms overrides. Fixed costs: data 5 ms, optimizer 10 ms, all-reduce 10 ms + 2 ms per
// doubling of the ranks (a tree/ring latency term).
constexpr double kDefaultComputeMs = 300, kDataMs = 5, kOptimizerMs = 10;
inline double comm_ms(int world) { return 10.0 + 2.0 * std::log2(static_cast<double>(world)); }

// Sample ids with DistributedSampler's layout (run/sampler.h): global batch `index` of the run, rank
// r's contiguous slice, over a dataset of n = 2^k samples. The epoch's permutation is the keyed
// bijection id = c_e g(a_e j + b_e) mod n, g(x) = x ^ (x >> ceil(k/2)), a_e and c_e odd, keyed on
// (seed, epoch): computed per id (a materialised shuffle would cost O(dataset)), and not affine. An
// affine permutation (a_e j + b_e alone) repeats whole epochs shifted whenever two epochs draw the same
// a_e and a b_e that differs by a multiple of a_e x the global batch: with 2^14 odd multipliers at 2
// ranks, epoch 730 replayed epoch 664 and data_replay fired on a healthy run. Here that would take the
// same (a_e, b_e, c_e), ~2^-43 per pair of epochs at k = 15.
struct FleetSampler {
  int64_t n = 0, global = 0, per_rank = 0, per_epoch = 0;
  uint64_t seed = 0;
  int shift = 1;
  FleetSampler(int world, int per_rank_batch, uint64_t s) : per_rank(per_rank_batch), seed(s) {
    global = int64_t{world} * per_rank;
    n = 1;
    int k = 0;
    while (n < global * 1000) n <<= 1, ++k;  // 1000..2000 steps per epoch
    shift = (k + 1) / 2 > 0 ? (k + 1) / 2 : 1;
    per_epoch = n / global;
  }
  int64_t epoch(int64_t index) const { return index / per_epoch; }
  // Rank `rank`'s ids of global batch `index` (per_rank of them).
  void ids(int64_t index, int rank, int64_t* out) const {
    const int64_t e = index / per_epoch, pos = index % per_epoch;
    keys(e);
    permute_run(pos * global + rank * per_rank, per_rank, out);
  }
  // Every rank's ids of global batch `index` at once (global of them, rank r's at r x per_rank).
  void global_ids(int64_t index, int64_t* out) const {
    const int64_t e = index / per_epoch, pos = index % per_epoch;
    keys(e);
    permute_run(pos * global, global, out);
  }
  // Whether the ids fit 32 bits (n <= 2^32: below ~270,000 ranks of 16 samples), for permutation32.
  bool fits32() const { return n <= (int64_t{1} << 32); }
  // Global batch `index`'s permutation in 32-bit arithmetic (lanes.h) and its first position: rank r's
  // ids are at positions first + r x per_rank + k. Needs fits32().
  Permutation32 permutation32(int64_t index, uint32_t* first) const {
    const int64_t e = index / per_epoch, pos = index % per_epoch;
    keys(e);
    *first = static_cast<uint32_t>(pos * global);
    return {static_cast<uint32_t>(a_), static_cast<uint32_t>(b_), static_cast<uint32_t>(c_),
            static_cast<uint32_t>(n - 1), shift};
  }
  // The same ids by position in the rank's batch: out[k x ranks + r] is rank r's k-th id (ranks =
  // global / per_rank), the layout lanes.h hashes every rank's batch from.
  void slot_ids(int64_t index, int64_t* out) const {
    const int64_t e = index / per_epoch, pos = index % per_epoch, ranks = global / per_rank;
    keys(e);
    for (int64_t k = 0; k < per_rank; ++k) permute_run(pos * global + k, ranks, out + k * ranks, per_rank);
  }

 private:
  void keys(int64_t e) const {  // for the last epoch asked: consecutive steps share it
    if (e == key_epoch_) return;
    key_epoch_ = e;
    a_ = mix(seed ^ mix(static_cast<uint64_t>(e) * 2 + 1)) | 1;
    b_ = mix(seed + static_cast<uint64_t>(e));
    c_ = mix(seed ^ mix(static_cast<uint64_t>(e) * 2 + 2)) | 1;
  }
  // out[j] = the permutation of position first + j x stride, j < count (walk.cpp)
  void permute_run(int64_t first, int64_t count, int64_t* out, int64_t stride = 1) const;
  mutable int64_t key_epoch_ = -1;
  mutable uint64_t a_ = 1, b_ = 0, c_ = 1;
};

}  // namespace flatline::simdetail
