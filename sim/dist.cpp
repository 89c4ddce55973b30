#include "sim/dist.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/net.h"
#include "core/protocol.h"

namespace flatline {

Comm::Comm(int rank, int world, const std::string& addr, int port, std::chrono::milliseconds timeout)
    : rank_(rank), world_(world) {
  if (world == 1) return;
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(port);
    o.isServer = rank == 0;
    o.numWorkers = world;
    o.waitWorkers = true;
    o.timeout = std::max(timeout, std::chrono::milliseconds(static_cast<int64_t>(kJoinTimeoutS * 1000)));
    store_ = c10::make_intrusive<c10d::TCPStore>(addr, o);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // The interface peers reach this rank on: GLOO_SOCKET_IFNAME, else the route to MASTER_ADDR (core/net.h).
    const char* ifname = std::getenv(kEnvGlooSocketIfname);
    opts->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                              : c10d::ProcessGroupGloo::createDeviceForHostname(
                                                    local_address_toward(addr, port)));
    opts->threads = 1;
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("flatline", store_), rank, world, opts);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: cannot join the process group at {}:{} (world size {}): {}", rank, addr,
                                port, world, e.what()));
  }
}

Comm::~Comm() = default;

void Comm::run(const char* what, const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw CommError(fmt::format("rank {}: {} failed (a peer died, hung past the collective timeout, or closed "
                                "its connection): {}", rank_, what, msg));
  }
}

void Comm::allreduce_sum(at::Tensor& t) {
  if (world_ == 1) return;
  run("all-reduce", [&] {
    std::vector<at::Tensor> v{t};
    pg_->allreduce(v)->wait();
  });
}

void Comm::allreduce_max(at::Tensor& t) {
  if (world_ == 1) return;
  run("all-reduce(max)", [&] {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    pg_->allreduce(v, o)->wait();
  });
}

void Comm::broadcast(at::Tensor& t, int root) {
  if (world_ == 1) return;
  run("broadcast", [&] {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    pg_->broadcast(v, o)->wait();
  });
}

void Comm::barrier() {
  if (world_ == 1) return;
  at::Tensor t = at::zeros({1});
  allreduce_sum(t);
}

double Comm::shared_start_time(double mine) {
  if (world_ == 1) return mine;
  at::Tensor t = at::full({1}, rank_ == 0 ? mine : 0.0, at::kDouble);
  broadcast(t, 0);
  return t.item<double>();
}

}  // namespace flatline
