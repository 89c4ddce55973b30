// What this binary was built with, what it can run on, and where a scenario's ranks train
// (torch-free interface; sim/build_info.cpp): what `flatline --version` prints and each run's
// manifest records.
#pragma once
#include <string>

#include "run/scenario.h"

namespace flatline {

// A scenario's placement with `auto` resolved (the rule the trainer follows):
//   process_group: nccl | gloo as named; auto: none at world_size 1, else nccl on cuda, gloo on cpu;
//   kernels: flatline | aten as named; auto: aten on cuda, flatline on cpu.
struct ResolvedPlacement {
  std::string device, process_group, kernels;
};
ResolvedPlacement resolve_placement(const Scenario& s);
// "device cuda, process group nccl, kernels aten"
std::string placement_info(const Scenario& s);

// "LibTorch 2.11.0; CUDA 13.0, cuDNN 9.19.0, NCCL 2.28.9 compiled in (CUDA toolkit: PyPI nvidia-cuda-nvcc
// 13.0.88)", the toolkit the build compiled against (cmake/cuda_from_wheel.cmake: the wheel's own from
// PyPI, or a path with FLATLINE_CUDA=system); or "CUDA/NCCL not compiled in".
std::string build_info();
// The devices this process sees: "cpu (16 threads); cuda: 1 GPU (cuda:0 NVIDIA H200)" or
// "cpu (2 threads); cuda: no GPU".
std::string devices_info();
// Number of CUDA devices visible to this process (0 without CUDA).
int cuda_device_count();

}  // namespace flatline
