// A free TCP port for a run's TCPStore (the launcher, and tests that start ranks as threads).
// Why not the kernel's pick for port 0: that is an ephemeral port, and a rank that connects before
// rank 0's store listens can be handed that very port as its own source port and connect to itself
// (TCP simultaneous open on loopback): c10d then times out on a store that never answered. So the port
// is drawn below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) and checked free by
// binding it once. A port another process takes between the check and the store's bind makes the store
// fail to start with a clear error (address in use).
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace flatline {

inline bool tcp_port_free(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return false;
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as the store will bind it
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

inline int free_tcp_port() {
  int ephemeral_lo = 32768;  // Linux's default lower bound
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_lo;
  const int lo = 10000, hi = ephemeral_lo > lo + 1000 ? ephemeral_lo : 30000;
  static thread_local std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo));
    if (tcp_port_free(port)) return port;
  }
  throw std::runtime_error(std::string("cannot find a free TCP port below ") + std::to_string(hi) + ": " +
                           std::strerror(errno));
}

}  // namespace flatline
