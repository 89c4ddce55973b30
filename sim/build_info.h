// What this binary was built with and what it can run on (torch-free interface; sim/build_info.cpp):
// the line `flatline --version` prints and each run's manifest records.
#pragma once
#include <string>

namespace flatline {

// "LibTorch 2.11.0; CUDA 13.0, cuDNN 9.19.0, NCCL 2.28.9 compiled in" (or "CUDA/NCCL not compiled in").
std::string build_info();
// The devices this process sees: "cpu (16 threads); cuda: 1 GPU (cuda:0 NVIDIA H200)" or
// "cpu (2 threads); cuda: no GPU".
std::string devices_info();
// Number of CUDA devices visible to this process (0 without CUDA).
int cuda_device_count();

}  // namespace flatline
