// The local address a rank's Gloo device binds (sim/dist.cpp): the source address of the route to
// MASTER_ADDR, so that a rank on another host (or network namespace) announces an address its peers
// can reach, and a single host stays on loopback. Why not Gloo's default (the address the machine's
// hostname resolves to): that names an interface of one host only, and inside a network namespace or
// a container it is often not bindable at all. GLOO_SOCKET_IFNAME (core/protocol.h) overrides this.
// How: connect(2) a UDP socket to MASTER_ADDR (no packet is sent) and read getsockname(2).
#pragma once
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace flatline {

// Throws std::runtime_error naming MASTER_ADDR and the reason (no route, cannot resolve).
inline std::string local_address_toward(const std::string& master_addr, int master_port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  const int rc = getaddrinfo(master_addr.c_str(), std::to_string(master_port).c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw std::runtime_error("MASTER_ADDR '" + master_addr + "': cannot resolve: " + gai_strerror(rc));
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    freeaddrinfo(res);
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  }
  const int c = connect(s, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (c != 0 || getsockname(s, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    close(s);
    throw std::runtime_error("MASTER_ADDR '" + master_addr + "': no route from this host: " + std::strerror(err));
  }
  close(s);
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  return buf;
}

}  // namespace flatline
