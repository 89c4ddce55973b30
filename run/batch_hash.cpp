// xxHash compiled in (header-only mode): at fleet scale the library call's dispatch was a fifth of
// the hash's cost. The same XXH3-64 function, so the same hashes as libxxhash gives.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "run/sampler.h"

namespace flatline {

uint64_t batch_hash(const std::vector<int64_t>& ids) {
  return batch_hash(ids.data(), ids.size());
}

uint64_t batch_hash(const int64_t* ids, size_t n) { return XXH3_64bits(ids, n * sizeof(int64_t)); }

}  // namespace flatline
