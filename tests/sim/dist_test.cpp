// Every collective flatline runs through c10d's ProcessGroupGloo (sim/dist.h Comm), on 2 and 3 real
// ranks (threads of this process, each with its own process group over one TCPStore), with exact
// values: the dtypes and sizes the trainer uses (a float32 gradient bucket of ~100k elements with the
// loss riding along, the float64 parameter checksums of the consistency check, the float64 eval sums,
// the broadcast of the run's start time, the barrier). The gloo headers these ranks were compiled
// against are Debian's, older than the gloo inside libtorch_cpu.so (docs/DESIGN.md §15): a layout or
// ABI mismatch between the two shows here as a wrong value, a crash or a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/ports.h"
#include "sim/dist.h"

namespace flatline {
namespace {

using Body = std::function<void(Comm&)>;

// Runs `body` on `world` ranks; each rank's error (empty: none) in rank order.
std::vector<std::string> on_ranks(int world, const Body& body, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const int port = free_tcp_port();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        Comm comm(r, world, "127.0.0.1", port, timeout, ProcessGroupKind::gloo, at::Device(at::kCPU));
        body(comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

class Collectives : public ::testing::TestWithParam<int> {};

// The trainer's gradient bucket: one flat float32 tensor, every element an integer-valued float so the
// sum is exact in any order: element i of rank r holds (r + 1) * (i % 1000) - r.
TEST_P(Collectives, AllReduceSumOfAFloat32GradientBucketIsExactOnEveryRank) {
  const int world = GetParam();
  const int64_t n = 100'003;  // not a multiple of anything gloo chunks by
  std::atomic<int64_t> wrong{0};
  expect_no_errors(on_ranks(world, [&](Comm& c) {
    const int r = c.rank();
    at::Tensor t = at::arange(n, at::kFloat).fmod_(1000).mul_(r + 1).sub_(r);
    c.allreduce_sum(t);
    // sum over r of (r + 1) * k - r = k * W(W+1)/2 - W(W-1)/2
    const float a = world * (world + 1) / 2.0f, b = world * (world - 1) / 2.0f;
    at::Tensor want = at::arange(n, at::kFloat).fmod_(1000).mul_(a).sub_(b);
    wrong += (t != want).sum().item<int64_t>();
    EXPECT_EQ(t.numel(), n);
    EXPECT_EQ(t.scalar_type(), at::kFloat);
  }));
  EXPECT_EQ(wrong.load(), 0);
}

// The eval all-reduce and the loss: float64 sums, exact for these values.
TEST_P(Collectives, AllReduceSumOfFloat64IsExact) {
  const int world = GetParam();
  std::vector<double> got(static_cast<size_t>(world) * 2);
  expect_no_errors(on_ranks(world, [&](Comm& c) {
    at::Tensor s = at::tensor({0.5 * (c.rank() + 1), double(c.rank() + 1)}, at::kDouble);
    c.allreduce_sum(s);
    got[static_cast<size_t>(c.rank()) * 2] = s[0].item<double>();
    got[static_cast<size_t>(c.rank()) * 2 + 1] = s[1].item<double>();
  }));
  const double tri = world * (world + 1) / 2.0;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r) * 2], 0.5 * tri) << "rank " << r;
    EXPECT_EQ(got[static_cast<size_t>(r) * 2 + 1], tri) << "rank " << r;
  }
}

// The consistency check: max of (checksum, -checksum) over ranks; equal checksums give c0 == -c1, one
// rank's other checksum does not, and every rank sees the same verdict.
TEST_P(Collectives, AllReduceMaxOfTheParameterChecksumsFindsTheOneRankThatDiffers) {
  const int world = GetParam();
  std::vector<double> c0(static_cast<size_t>(world)), c1(static_cast<size_t>(world));
  std::vector<int> mismatch(static_cast<size_t>(world));
  expect_no_errors(on_ranks(world, [&](Comm& c) {
    for (int odd : {-1, world - 1}) {  // -1: every rank the same; else that rank differs
      const double checksum = c.rank() == odd ? 1234.5678 + 1e-9 : 1234.5678;
      at::Tensor t = at::tensor({checksum, -checksum}, at::kDouble);
      c.allreduce_max(t);
      if (odd < 0) {
        c0[static_cast<size_t>(c.rank())] = t[0].item<double>();
        c1[static_cast<size_t>(c.rank())] = t[1].item<double>();
      } else {
        mismatch[static_cast<size_t>(c.rank())] = t[0].item<double>() != -t[1].item<double>();
      }
    }
  }));
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(c0[static_cast<size_t>(r)], 1234.5678);
    EXPECT_EQ(c1[static_cast<size_t>(r)], -1234.5678);
    EXPECT_EQ(mismatch[static_cast<size_t>(r)], 1) << "rank " << r;
  }
}

// The run's clock: rank 0's start time reaches every rank bit for bit (broadcast from root 0), and a
// broadcast from the last rank works too.
TEST_P(Collectives, BroadcastCarriesRankZerosStartTimeAndAnyRootsTensorExactly) {
  const int world = GetParam();
  const double t0 = 1764638400.123456789;
  std::vector<double> start(static_cast<size_t>(world));
  std::atomic<int64_t> wrong{0};
  expect_no_errors(on_ranks(world, [&](Comm& c) {
    start[static_cast<size_t>(c.rank())] = c.shared_start_time(c.rank() == 0 ? t0 : -1.0 - c.rank());
    at::Tensor t = c.rank() == world - 1 ? at::arange(4099, at::kFloat).mul_(0.25f) : at::zeros({4099}, at::kFloat);
    c.broadcast(t, world - 1);
    wrong += (t != at::arange(4099, at::kFloat).mul_(0.25f)).sum().item<int64_t>();
  }));
  for (int r = 0; r < world; ++r) EXPECT_EQ(start[static_cast<size_t>(r)], t0) << "rank " << r;
  EXPECT_EQ(wrong.load(), 0);
}

// A barrier holds every rank until the last arrives: the last rank sleeps 300 ms before it.
TEST_P(Collectives, BarrierWaitsForTheLastRank) {
  const int world = GetParam();
  std::vector<double> waited_ms(static_cast<size_t>(world));
  expect_no_errors(on_ranks(world, [&](Comm& c) {
    c.barrier();  // everyone connected
    const auto t = std::chrono::steady_clock::now();
    if (c.rank() == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    c.barrier();
    waited_ms[static_cast<size_t>(c.rank())] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  }));
  for (int r = 0; r < world; ++r) EXPECT_GE(waited_ms[static_cast<size_t>(r)], 290) << "rank " << r;
}

// Many collectives in a row keep their order and values (the trainer issues 2-3 a step, thousands a run).
TEST_P(Collectives, AThousandAllReducesInARowStayInStepAndExact) {
  const int world = GetParam();
  std::atomic<int64_t> wrong{0};
  expect_no_errors(on_ranks(world, [&](Comm& c) {
    for (int step = 0; step < 1000; ++step) {
      at::Tensor t = at::full({7}, float(step * (c.rank() + 1)), at::kFloat);
      c.allreduce_sum(t);
      wrong += (t != float(step * world * (world + 1) / 2)).sum().item<int64_t>();
    }
  }));
  EXPECT_EQ(wrong.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Gloo, Collectives, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param) + "Ranks"; });

// A rank that never joins the collective makes the others fail with CommError, naming the collective,
// within the timeout rather than hanging.
TEST(Collectives, ARankThatStaysAwayFailsThePeersWithinTheTimeout) {
  const auto t = std::chrono::steady_clock::now();
  const auto errors = on_ranks(3, [&](Comm& c) {
    at::Tensor x = at::ones({16}, at::kFloat);
    c.allreduce_sum(x);  // all three: connected
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(4));  // past the others' 1.5 s timeout
      return;
    }
    c.allreduce_sum(x);
  }, std::chrono::milliseconds(1500));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  for (int r : {0, 1}) EXPECT_NE(errors[static_cast<size_t>(r)].find("all-reduce failed"), std::string::npos) << errors[static_cast<size_t>(r)];
  EXPECT_EQ(errors[2], "");
  EXPECT_LT(s, 20);
}

}  // namespace
}  // namespace flatline
