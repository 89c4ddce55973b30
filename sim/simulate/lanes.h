// The fleet simulator's per-rank draws and batch hashes for a whole step at once (docs/DESIGN.md §11): the
// same values as model.h's gauss(draw(key, r)) / unif(draw(key, r)) and run/sampler.h's batch_hash (XXH3-64),
// computed four ranks at a time (eight for the batch hashes) with AVX2 where the CPU has it (checked once,
// at the first call), one at a time elsewhere; and the step's other passes over every rank that GCC does
// not vectorise (the heartbeats due, the slowest rank). Bit-identical either way
// (tests/sim/simulate/lanes_test.cpp): the telemetry of a scenario and seed does not depend on the machine.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flatline::simdetail {

// out[i] = gauss(draw(step_key, first + i)), i < n (model.h).
void gauss_draws(uint64_t step_key, int64_t first, size_t n, double* out);
// out[i] = unif(draw(step_key, first + i)), i < n.
void unif_draws(uint64_t step_key, int64_t first, size_t n, double* out);

// The draws put to use in the same pass (one store, no second loop over a column of draws), with the
// IEEE operations in the order written here, none fused, so the values are those of the two steps:
// a value with relative noise, (a x (q + b x g)) x c (a compute time, a loss, a local gradient norm), and
// a time offset, a + b x u.
struct Noise {
  double a = 1, q = 0, b = 1, c = 1;
  double operator()(double g) const { return (a * (q + b * g)) * c; }
};
struct Offset {
  double a = 0, b = 1;
  double operator()(double u) const { return a + b * u; }
};
// out[i] = f(gauss(draw(step_key, first + i))), i < n.
void gauss_draws(uint64_t step_key, int64_t first, size_t n, const Noise& f, double* out);
// out[i] = f(unif(draw(step_key, first + i))), i < n.
void unif_draws(uint64_t step_key, int64_t first, size_t n, const Offset& f, double* out);

// The batch hash of each of `lanes` batches of m sample ids, laid out by position: ids[k * lanes + j] is
// the k-th id of batch j. out[j] = batch_hash(batch j's m ids) = XXH3-64 of their 8m bytes. Any m >= 1.
void batch_hashes(const int64_t* ids, int m, size_t lanes, uint64_t* out);

// The sampler's epoch permutation in 32-bit arithmetic (model.h FleetSampler, over n <= 2^32 sample
// ids, mask = n - 1): the id at position p is (c g((a p + b) & mask)) & mask, g(x) = x ^ (x >> shift),
// every product and sum mod 2^32 (2^k divides 2^32, so these are the ids of the 64-bit definition).
struct Permutation32 {
  uint32_t a = 1, b = 0, c = 1, mask = 0;
  int shift = 1;
  uint32_t at(uint32_t p) const {
    const uint32_t x = (a * p + b) & mask;
    return (c * (x ^ (x >> shift))) & mask;
  }
};
// out[r] = batch_hash of rank r's m ids (XXH3-64 of their 8m bytes, run/sampler.h), the ids at positions
// first + r m + k, k < m, r < ranks (DistributedSampler's contiguous slices of one global batch), with no
// ids stored: with AVX2 and 3 <= m <= 16 (17..128 bytes) the ids of eight ranks are made in 32-bit lanes
// and hashed straight from the registers (an id's high 32 bits are 0, so XXH3's 64 x 64 -> 128 multiply
// needs three 32 x 32 products, not four); elsewhere rank by rank. Positions mod 2^32 (first + ranks x m
// <= n in use).
void sampler_batch_hashes(const Permutation32& p, uint32_t first, int m, size_t ranks, uint64_t* out);

// The ranks r < n whose next heartbeat is due before `until` (t[r] < until; a NaN never is), ascending,
// into out (room for n + 8: the AVX2 path stores eight at a time); returns how many. Eight ranks at a
// time with AVX2, no branch per rank: at fleet scale a step's heartbeats come from a third of the ranks.
size_t due_ranks(const double* t, size_t n, double until, uint32_t* out);

// The largest of init and v[0..n) as four lanes find it: lane k takes v[k], v[k + 4], ... from init by
// m = v > m ? v : m, the last n mod 4 go to lane 0, then lane 0 takes lanes 1, 2, 3 likewise. A NaN is
// never taken (after a non-NaN init); the same bits with AVX2 (vmaxpd is that select) as without.
double lanes_max(double init, const double* v, size_t n);

// Whether the AVX2 paths run on this CPU (for the benchmarks' notes).
bool lanes_use_avx2();

}  // namespace flatline::simdetail
