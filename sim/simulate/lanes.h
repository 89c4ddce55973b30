// The fleet simulator's per-rank draws and batch hashes for a whole step at once (docs/DESIGN.md §11): the
// same values as model.h's gauss(draw(key, r)) / unif(draw(key, r)) and run/sampler.h's batch_hash (XXH3-64),
// computed four ranks at a time with AVX2 where the CPU has it (checked once, at the first call), one
// at a time elsewhere. Bit-identical either way (tests/sim/simulate/lanes_test.cpp): the telemetry of a
// scenario and seed does not depend on the machine.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flatline::simdetail {

// out[i] = gauss(draw(step_key, first + i)), i < n (model.h).
void gauss_draws(uint64_t step_key, int64_t first, size_t n, double* out);
// out[i] = unif(draw(step_key, first + i)), i < n.
void unif_draws(uint64_t step_key, int64_t first, size_t n, double* out);

// The batch hash of each of `lanes` batches of m sample ids, laid out by position: ids[k * lanes + j] is
// the k-th id of batch j. out[j] = batch_hash(batch j's m ids) = XXH3-64 of their 8m bytes. Any m >= 1.
void batch_hashes(const int64_t* ids, int m, size_t lanes, uint64_t* out);

// Whether the AVX2 paths run on this CPU (for the benchmarks' notes).
bool lanes_use_avx2();

}  // namespace flatline::simdetail
