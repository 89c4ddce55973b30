// Comm: the data-parallel process group of one rank (torch; only sim/ includes this).
// Ranks join through c10d's TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it, as torchrun does)
// and talk through c10d's ProcessGroupGloo (CPU tensors, or CUDA tensors staged through the host) or
// ProcessGroupNCCL (CUDA tensors, one GPU per rank; sim/dist_nccl.cpp). Every collective has the
// scenario's timeout: a rank that hangs or dies makes the others throw CommError within that bound
// instead of waiting forever.
//  - Gloo: wait() blocks the host and throws once the timeout passes.
//  - NCCL: wait() only orders the caller's CUDA stream after the collective (as DDP does), so the host
//    runs ahead. The host waits only in read(), which copies device values back and polls for them
//    with the same deadline; past it the communicator is aborted (so its kernels return) and read()
//    throws. c10d's own NCCL watchdog gets a longer timeout (kNcclWatchdogExtraS) and is told to
//    abort without killing the process (TORCH_NCCL_ASYNC_ERROR_HANDLING=2, unless set), so the
//    rank can write its error event and drain its telemetry first.
// world_size 1 needs no process group (collectives are identities) unless one is asked for by name
// (`process_group: gloo | nccl`: a one-GPU machine exercises NCCL that way).
#pragma once
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/core/Event.h>

#include <memory>

#include "sim/torch_pch.h"

namespace c10d {
class Backend;
class Store;
class Work;
}  // namespace c10d

namespace flatline {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ProcessGroupKind { none, gloo, nccl };

// A copy back to the host under way (Comm::start_read): `host` is valid once finish_read returns.
struct Readback {
  at::Tensor host;
  std::shared_ptr<c10::Event> done;  // null: the value was on the host already
  explicit operator bool() const { return host.defined(); }
};

// Seconds c10d's NCCL watchdog waits beyond the collective timeout before it acts on its own: ours
// (read()'s deadline) must fire first, so that the rank ends through its own error path.
constexpr double kNcclWatchdogExtraS = 30;

class Comm {
 public:
  // `device`: where the tensors handed to collectives live (NCCL: a CUDA device, one per rank).
  // `kind` none: no process group (world_size 1 only).
  Comm(int rank, int world_size, const std::string& master_addr, int master_port,
       std::chrono::milliseconds timeout, ProcessGroupKind kind, at::Device device);
  ~Comm();
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  ProcessGroupKind kind() const { return kind_; }
  const at::Device& device() const { return device_; }
  void allreduce_sum(at::Tensor& t);   // in place
  void allreduce_max(at::Tensor& t);   // in place
  void broadcast(at::Tensor& t, int root);
  void barrier();
  // Seconds since epoch of rank 0's start, shared through the store: every rank's t counts from it.
  double shared_start_time(double my_start);
  // A CPU copy of `t` once every collective issued before it has finished, within the collective
  // timeout (CommError past it, `what` naming the wait). CPU tensors come back as they are.
  at::Tensor read(const at::Tensor& t, const char* what);
  // read() in two halves: start_read() enqueues the copy (into pinned memory) and returns at once;
  // finish_read() waits for it as read() does.
  Readback start_read(const at::Tensor& t);
  at::Tensor finish_read(Readback& r, const char* what);

 private:
  void run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& f);
  void check_pending(const char* what);
  int rank_, world_;
  ProcessGroupKind kind_;
  at::Device device_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_;  // NCCL works issued since the last read()
};

// Where a Gloo rank listens: a named network interface, else the address of `hostname`.
struct GlooDevice {
  std::string interface, hostname;
};
// ProcessGroupGloo over `store` with one device and one worker thread (sim/dist_gloo.cpp, the only
// file that sees the gloo headers).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                   int world, std::chrono::milliseconds timeout,
                                                   const GlooDevice& device);

// ProcessGroupNCCL over `store` on `device` (sim/dist_nccl.cpp); throws CommError in a LibTorch
// without NCCL.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                   int world, std::chrono::milliseconds timeout, at::Device device);

}  // namespace flatline
