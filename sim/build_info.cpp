#include "sim/build_info.h"

#include "sim/build_config.h"  // build/sim/, from sim/build_config.h.in

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/headeronly/version.h>

#include <thread>

#if FLATLINE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <nccl.h>
#endif

namespace flatline {

ResolvedPlacement resolve_placement(const Scenario& s) {
  ResolvedPlacement p;
  const bool cuda = s.device == "cuda";
  p.device = s.device;
  p.process_group = s.process_group != "auto" ? s.process_group : s.world_size == 1 ? "none" : cuda ? "nccl" : "gloo";
  p.kernels = s.kernels != "auto" ? s.kernels : cuda ? "aten" : "flatline";
  return p;
}

std::string placement_info(const Scenario& s) {
  const ResolvedPlacement p = resolve_placement(s);
  return fmt::format("device {}, process group {}, kernels {}", p.device, p.process_group, p.kernels);
}

std::string build_info() {
  std::string s = fmt::format("LibTorch {}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
#if FLATLINE_WITH_CUDA
  s += fmt::format("; CUDA {}.{}, cuDNN {}.{}.{}, NCCL {}.{}.{} compiled in (CUDA toolkit: {})", CUDART_VERSION / 1000,
                   CUDART_VERSION % 1000 / 10, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, NCCL_MAJOR, NCCL_MINOR,
                   NCCL_PATCH, FLATLINE_CUDA_TOOLKIT);
#else
  s += "; CUDA/NCCL not compiled in";
#endif
  return s;
}

int cuda_device_count() { return static_cast<int>(torch::cuda::device_count()); }

std::string devices_info() {
  std::string s = fmt::format("cpu ({} threads)", std::thread::hardware_concurrency());
  const int n = cuda_device_count();
  if (n == 0) return s + "; cuda: no GPU";
  s += fmt::format("; cuda: {} GPU{} (", n, n == 1 ? "" : "s");
#if FLATLINE_WITH_CUDA
  for (int i = 0; i < n; ++i) s += fmt::format("{}cuda:{} {}", i ? ", " : "", i, at::cuda::getDeviceProperties(i)->name);
#endif
  return s + ")";
}

}  // namespace flatline
