// ProcessGroupGloo for CPU ranks (and CUDA tensors staged through the host). This file alone includes
// c10d's ProcessGroupGloo.hpp, and with it the gloo headers, which the PyPI wheel does not ship: they
// come from Debian's libgloo-dev, a gloo older than the one built into the wheel's libtorch_cpu.so.
// That is safe only as long as this object uses gloo through torch and through pointers alone
// (docs/DESIGN.md §15, "gloo headers"): it calls exported c10d functions (the Options constructor,
// the device factories, the ProcessGroupGloo constructor), holds gloo objects only in shared_ptr,
// and neither defines nor calls a function of gloo's own. tests/sim/gloo_abi_check.cmake checks the
// object's symbols for that; tests/sim/dist_test.cpp runs every collective flatline uses on 2 and 3
// ranks.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "sim/dist.h"

namespace flatline {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                   int world, std::chrono::milliseconds timeout,
                                                   const GlooDevice& device) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(device.interface.empty()
                              ? c10d::ProcessGroupGloo::createDeviceForHostname(device.hostname)
                              : c10d::ProcessGroupGloo::createDeviceForInterface(device.interface));
  opts->threads = 1;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

}  // namespace flatline
