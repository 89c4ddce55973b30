// ProcessGroupNCCL for CUDA ranks (its header needs the CUDA and NCCL headers: this file alone sees
// them). Compiled only against a LibTorch with CUDA; sim/dist_nccl_none.cpp stands in otherwise.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>

#include "sim/dist.h"

namespace flatline {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                   int world, std::chrono::milliseconds timeout, at::Device device) {
  if (!device.is_cuda())
    throw CommError(fmt::format("rank {}: ProcessGroupNCCL needs a CUDA device, this rank's is {}", rank, device.str()));
  // c10d's watchdog: on a timeout or an asynchronous NCCL error it aborts the communicator but leaves
  // the process alive (2 = CleanUpOnly, c10d ErrorHandlingMode in ProcessGroupNCCL.hpp); its default
  // kills the process before the rank has written its error event. A value set by the user stays.
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(device);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout + std::chrono::milliseconds(static_cast<int64_t>(kNcclWatchdogExtraS * 1000));
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
}

}  // namespace flatline
