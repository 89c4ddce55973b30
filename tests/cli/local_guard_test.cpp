// The local world-size guard (cli/local_guard.h): the bound by cores and by memory, the message that
// names the numbers and what to do instead, and the per-rank memory estimate against measured peaks.
#include <gtest/gtest.h>

#include "cli/local_guard.h"
#include "faults/scenario_file.h"

namespace flatline {
namespace {

constexpr double kGiB = 1 << 30, kMiB = 1 << 20;

Scenario gpt(int world, int n_layer, int n_embd, int block, int batch) {
  return load_scenario_text("name: g\nmodel: {kind: gpt, n_layer: " + std::to_string(n_layer) +
                                ", n_head: 4, n_embd: " + std::to_string(n_embd) + ", block_size: " +
                                std::to_string(block) + "}\nworld_size: " + std::to_string(world) +
                                "\nbatch_size: " + std::to_string(batch) + "\nexpect: {cause: healthy}\n",
                            "scenarios/x.yaml");
}

TEST(LocalGuard, AThousandRanksOnTwoCoresAreRefusedWithTheNumbersAndTheWayOut) {
  const MachineCapacity here{2, 24 * kGiB};
  const std::string why = local_world_refusal(gpt(1024, 4, 128, 128, 16), here, false);
  EXPECT_NE(why.find("scenarios/x.yaml: world_size 1024 is more than this machine can run as local processes"),
            std::string::npos) << why;
  EXPECT_NE(why.find("2 cores allow at most 8 local ranks (4 per core"), std::string::npos) << why;
  EXPECT_NE(why.find("exceeds 80% of the 24.0 GiB available"), std::string::npos) << why;
  EXPECT_NE(why.find("flatline simulate scenarios/x.yaml --ranks 1024"), std::string::npos) << why;
  EXPECT_NE(why.find("torchrun --no-python or srun"), std::string::npos) << why;
}

TEST(LocalGuard, TheCoreBoundIsFourRanksPerCoreAndOversubscribeLiftsIt) {
  const MachineCapacity here{2, 24 * kGiB};
  EXPECT_EQ(local_world_refusal(gpt(8, 2, 64, 64, 16), here, false), "");
  const std::string nine = local_world_refusal(gpt(9, 2, 64, 64, 16), here, false);
  EXPECT_NE(nine.find("at most 8 local ranks"), std::string::npos) << nine;
  EXPECT_EQ(nine.find("available"), std::string::npos) << "memory is fine: only the cores are named";
  EXPECT_EQ(local_world_refusal(gpt(9, 2, 64, 64, 16), here, true), "");
}

TEST(LocalGuard, MemoryIsCheckedEvenWhenOversubscribing) {
  const MachineCapacity small{64, 1 * kGiB};  // cores to spare, 1 GiB available
  const Scenario s = gpt(4, 4, 128, 128, 16);  // ~0.7 GiB per rank
  const std::string why = local_world_refusal(s, small, true);
  EXPECT_NE(why.find("exceeds 80% of the 1.0 GiB available (at most 1 ranks)"), std::string::npos) << why;
  EXPECT_EQ(why.find("cores allow"), std::string::npos) << why;
}

// The estimate against the peak resident memory (VmHWM) of real workers on this project's VM
// (LibTorch 2.11 from .venv, CPU, measured while `flatline run` trained them): never below it, at most
// 35% above.
TEST(LocalGuard, TheMemoryEstimateCoversMeasuredWorkers) {
  struct Case {
    Scenario s;
    double measured_mib;
  };
  Scenario cnn = load_scenario_text(
      "name: c\nmodel: {kind: cnn, channels: 16, hidden: 64}\ndata: {kind: fashion_mnist}\nworld_size: 2\n"
      "batch_size: 64\nexpect: {cause: healthy}\n",
      "c.yaml");
  const Case cases[] = {
      {gpt(2, 1, 32, 32, 8), 421.1},    // VmHWM 431,224 KiB
      {gpt(2, 2, 64, 64, 16), 463.8},   // 474,972 KiB
      {gpt(2, 4, 128, 128, 16), 658.3}, // 674,084 KiB
      {cnn, 527.6},                     // 540,212 KiB
  };
  for (const auto& c : cases) {
    const double est = rank_memory_bytes(c.s) / kMiB;
    EXPECT_GE(est, c.measured_mib) << c.s.model.kind << " " << c.s.model.n_layer << "x" << c.s.model.n_embd;
    EXPECT_LE(est, 1.35 * c.measured_mib) << c.s.model.kind << " " << c.s.model.n_layer << "x" << c.s.model.n_embd;
  }
}

TEST(LocalGuard, ThisMachineIsRead) {
  const MachineCapacity m = this_machine();
  EXPECT_GE(m.cores, 1);
  EXPECT_GT(m.available_bytes, 64 * kMiB);
}

}  // namespace
}  // namespace flatline
