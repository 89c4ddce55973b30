// The local world-size guard (docs/DESIGN.md §8): `flatline run` and `flatline score` start one process
// per rank on this machine, so before spawning they check the scenario's world_size against its cores
// and memory and refuse beyond a stated bound, with a message that names the numbers and points to
// `flatline simulate` (fleet scale, no training) or to a launcher for real multi-host runs (torchrun,
// srun). Why: 1024 local ranks on a 2-core, 24 GiB machine climbed past 9 GiB in seconds and never
// trained a step. Fleet-only scenarios (`fleet_only: true`, run/scenario.h) never reach the guard:
// `run` refuses them and `score` skips them with a line.
#pragma once
#include <cstdint>
#include <string>

#include "run/scenario.h"

namespace flatline {

// Bounds, one named constant each.
// Ranks per core: each rank trains with at least a quarter of a core; beyond that a step takes so long
// that collective timeouts, not the scenario, decide the run. `--oversubscribe` lifts this bound only
// (mpirun's name for it).
constexpr int kMaxRanksPerCore = 4;
// The share of MemAvailable (/proc/meminfo) the ranks' estimated peak may take: the launcher, the page
// cache and the estimate's error need the rest.
constexpr double kMaxMemoryFraction = 0.8;
// One rank's peak resident memory before its model and data: LibTorch 2.11 (the PyPI wheel, its CUDA
// libraries mapped), Gloo, the process. VmHWM of CPU workers measured 421 MiB for a 1-layer 32-wide GPT,
// 464 MiB for a 2x64 one, 658 MiB for a 4x128 one, 528 MiB for the CNN (Debian's LibTorch 1.13: 163 MiB
// for the first).
constexpr double kRankBaseBytes = 420.0 * (1 << 20);

struct MachineCapacity {
  int cores = 1;                    // CPUs this process may run on (sched_getaffinity)
  double available_bytes = 0;       // MemAvailable
};
MachineCapacity this_machine();

// Estimated peak resident bytes of one rank of `s`: kRankBaseBytes + the data as loaded + 5 copies of
// the parameters (parameters, gradients, AdamW's two moments, the update) + activations of one
// micro-batch. Activations of the GPT, in floats: n_layer x (16 B T C + 8 B H T^2) + 20 B T 256 (the
// attention scores dominate); of the CNN: 10 B channels 28 28. Fitted to the VmHWM of workers (1x32, 2x64,
// 4x128 and 8x512 GPTs, the CNN) so that it overestimates by 0-35%.
double rank_memory_bytes(const Scenario& s);

// Empty when `s` may run as world_size local processes here; else why not, with the numbers and what
// to do instead. `source` names the scenario in the message.
std::string local_world_refusal(const Scenario& s, const MachineCapacity& m, bool oversubscribe);

}  // namespace flatline
