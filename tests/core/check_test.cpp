// FLATLINE_CHECK (core/check.h): a broken invariant is an InvariantError naming the repository file,
// the line, the reason and the condition; a holding one costs nothing and throws nothing.
#include <gtest/gtest.h>

#include <fstream>

#include "core/check.h"
#include "core/ports.h"

namespace flatline {
namespace {

TEST(Check, ABrokenInvariantNamesFileLineReasonAndCondition) {
  const int ranks = 3;
  int line = 0;
  try {
    line = __LINE__ + 1;
    FLATLINE_CHECK(ranks < 2, "{} ranks where one was meant", ranks);
    FAIL() << "no throw";
  } catch (const InvariantError& e) {
    EXPECT_EQ(std::string(e.what()),
              "tests/core/check_test.cpp:" + std::to_string(line) + ": invariant broken: 3 ranks where one was meant "
              "(ranks < 2)");
  }
  EXPECT_NO_THROW(FLATLINE_CHECK(ranks == 3, "never"));
}

TEST(Ports, AFreePortIsBelowTheEphemeralRangeAndFree) {
  int ephemeral_lo = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_lo;
  const int p = free_tcp_port();
  EXPECT_GE(p, 10000);
  EXPECT_LT(p, ephemeral_lo);
  EXPECT_TRUE(tcp_port_free(p));
}

}  // namespace
}  // namespace flatline
