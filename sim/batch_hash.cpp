#include <xxhash.h>

#include "sim/sampler.h"

namespace flatline {

uint64_t batch_hash(const std::vector<int64_t>& ids) {
  return XXH3_64bits(ids.data(), ids.size() * sizeof(int64_t));
}

}  // namespace flatline
