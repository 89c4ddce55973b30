#include "sim/dist.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/net.h"
#include "core/protocol.h"

namespace flatline {
namespace {

// torchrun's agent already serves a TCPStore at MASTER_ADDR:MASTER_PORT and says so in this variable
// ("True"); every rank then joins it as a client, under the prefix of the agent's restart count, as
// torch.distributed's env:// rendezvous does (torch/distributed/rendezvous.py, _create_c10d_store).
constexpr const char* kAgentStoreEnv = "TORCHELASTIC_USE_AGENT_STORE";
constexpr const char* kRestartCountEnv = "TORCHELASTIC_RESTART_COUNT";

std::string first_line(std::string msg) {
  if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

const char* kind_name(ProcessGroupKind k) {
  return k == ProcessGroupKind::nccl ? "ProcessGroupNCCL" : k == ProcessGroupKind::gloo ? "ProcessGroupGloo" : "none";
}

}  // namespace

Comm::Comm(int rank, int world, const std::string& addr, int port, std::chrono::milliseconds timeout,
           ProcessGroupKind kind, at::Device device)
    : rank_(rank), world_(world), kind_(kind), device_(device), timeout_(timeout) {
  if (kind == ProcessGroupKind::none) {
    if (world != 1) throw CommError(fmt::format("rank {}: world size {} needs a process group", rank, world));
    return;
  }
  try {
    const char* agent = std::getenv(kAgentStoreEnv);
    const bool agent_store = agent && std::string(agent) == "True";
    const char* restarts = std::getenv(kRestartCountEnv);
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(port);
    o.isServer = rank == 0 && !agent_store;
    o.numWorkers = world;
    o.waitWorkers = !agent_store;
    o.timeout = std::max(timeout, std::chrono::milliseconds(static_cast<int64_t>(kJoinTimeoutS * 1000)));
    store_ = c10::make_intrusive<c10d::TCPStore>(addr, o);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        agent_store ? fmt::format("flatline/attempt_{}", restarts ? restarts : "0") : "flatline", store_);
    if (kind == ProcessGroupKind::nccl) {
      pg_ = make_nccl_backend(prefixed, rank, world, timeout, device);
    } else {
      // The interface peers reach this rank on: GLOO_SOCKET_IFNAME, else the route to MASTER_ADDR (core/net.h).
      GlooDevice d;
      if (const char* ifname = std::getenv(kEnvGlooSocketIfname); ifname && *ifname) d.interface = ifname;
      else d.hostname = local_address_toward(addr, port);
      pg_ = make_gloo_backend(prefixed, rank, world, timeout, d);
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: cannot join the process group ({}) at {}:{} (world size {}): {}", rank,
                                kind_name(kind), addr, port, world, first_line(e.what())));
  }
}

Comm::~Comm() = default;

void Comm::run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& f) {
  try {
    auto work = f();
    work->wait();  // Gloo: blocks, throws past the timeout. NCCL: orders the current stream after it.
    if (kind_ == ProcessGroupKind::nccl) pending_.push_back(std::move(work));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: {} failed (a peer died, hung past the collective timeout, or closed "
                                "its connection): {}", rank_, what, first_line(e.what())));
  }
}

void Comm::check_pending(const char* what) {
  for (auto& w : pending_) {
    std::exception_ptr ex;
    try {
      ex = w->exception();
    } catch (const std::exception& e) {
      throw CommError(fmt::format("rank {}: {} failed: {}", rank_, what, first_line(e.what())));
    }
    if (!ex) continue;
    try {
      std::rethrow_exception(ex);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("rank {}: {} failed (a peer died, hung past the collective timeout, or closed "
                                  "its connection): {}", rank_, what, first_line(e.what())));
    }
  }
  pending_.clear();
}

Readback Comm::start_read(const at::Tensor& t) {
  Readback r;
  if (!t.is_cuda()) {
    r.host = t;
    return r;
  }
  r.host = t.to(at::TensorOptions().device(at::kCPU), /*non_blocking=*/true);  // into pinned memory
  r.done = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
  r.done->record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(t.device()));
  return r;
}

at::Tensor Comm::finish_read(Readback& r, const char* what) {
  // Polled, not synchronised: a collective that a dead or hung peer never completes would block a
  // synchronise forever. Without a process group nothing can hang on a peer.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (r.done && !r.done->query()) {
    if (pg_ && std::chrono::steady_clock::now() > deadline) {
      try {
        pg_->abort();  // the communicator's kernels return, so that the process can exit
      } catch (...) {
      }
      throw CommError(fmt::format("rank {}: {} did not complete within the collective timeout ({:.0f} s): a peer "
                                  "died or hung", rank_, what, timeout_.count() / 1000.0));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  r.done.reset();
  check_pending(what);
  return r.host;
}

at::Tensor Comm::read(const at::Tensor& t, const char* what) {
  Readback r = start_read(t);
  return finish_read(r, what);
}

void Comm::allreduce_sum(at::Tensor& t) {
  if (!pg_) return;
  run("all-reduce", [&] {
    std::vector<at::Tensor> v{t};
    return pg_->allreduce(v);
  });
}

void Comm::allreduce_max(at::Tensor& t) {
  if (!pg_) return;
  run("all-reduce(max)", [&] {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    return pg_->allreduce(v, o);
  });
}

void Comm::broadcast(at::Tensor& t, int root) {
  if (!pg_) return;
  run("broadcast", [&] {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return pg_->broadcast(v, o);
  });
}

void Comm::barrier() {
  if (!pg_) return;
  at::Tensor t = at::zeros({1}, at::TensorOptions().device(device_));
  allreduce_sum(t);
  read(t, "barrier");  // NCCL: the host waits too
}

double Comm::shared_start_time(double mine) {
  if (!pg_) return mine;
  at::Tensor t = at::full({1}, rank_ == 0 ? mine : 0.0, at::TensorOptions().dtype(at::kDouble).device(device_));
  broadcast(t, 0);
  return read(t, "broadcast of the run's start time").item<double>();
}

}  // namespace flatline
