// Stands in for sim/dist_nccl.cpp in a LibTorch built without CUDA: asking for NCCL is an error.
#include <fmt/format.h>

#include "sim/dist.h"

namespace flatline {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int rank, int,
                                                   std::chrono::milliseconds, at::Device) {
  throw CommError(fmt::format("rank {}: process_group nccl: this build's LibTorch has no CUDA/NCCL "
                              "(flatline --version says what it was built with)", rank));
}

}  // namespace flatline
