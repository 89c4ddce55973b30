// Comm: the data-parallel process group of one rank (torch; only sim/ includes this).
// Ranks join through c10d's TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it, as torchrun does)
// and talk through ProcessGroupGloo on CPU. Every collective has the scenario's timeout: a rank that
// hangs or dies makes the others throw CommError within that bound instead of waiting forever.
// world_size 1 needs no process group: collectives are identities.
#pragma once
#include <chrono>
#include <stdexcept>
#include <string>

#include "sim/torch_pch.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace flatline {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  Comm(int rank, int world_size, const std::string& master_addr, int master_port,
       std::chrono::milliseconds timeout);
  ~Comm();
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  void allreduce_sum(at::Tensor& t);   // in place
  void allreduce_max(at::Tensor& t);   // in place
  void broadcast(at::Tensor& t, int root);
  void barrier();
  // Seconds since epoch of rank 0's start, shared through the store: every rank's t counts from it.
  double shared_start_time(double my_start);

 private:
  void run(const char* what, const std::function<void()>& f);
  int rank_, world_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

}  // namespace flatline
