// The `kernels: aten` step (CUDA's, run here on CPU: autocast, GradScaler's kernels, fused AdamW/SGD,
// scalars read back a step later) against the harness's own kernels, with real ranks over Gloo; and
// on CUDA (skipped with "skipped: no GPU" on a machine without one): the same step on the GPU, NCCL,
// Gloo on CUDA tensors, and the error for fewer GPUs than local ranks.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/build_info.h"
#include "tests/sim/ranks.h"

namespace flatline::test {
namespace {

Scenario with_kernels(Scenario s, const char* kernels) {
  s.kernels = kernels;
  return s;
}

std::vector<Record> steps_of(const std::string& dir, int rank) {
  std::vector<Record> out;
  for (auto& r : read_jsonl(dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr))
    if (r.kind == RecordKind::step) out.push_back(r);
  return out;
}

// fp16 with the loss_scale_collapse fault: a layer overflows for `steps` steps from `at`.
Scenario overflow_streak(Scenario s, int64_t at, int steps) {
  s.precision = "fp16";
  FaultSpec f;
  f.kind = "loss_scale_collapse";
  f.mode = "overflow_streak";
  f.at = at;
  f.params["steps"] = steps;
  s.faults.push_back(f);
  return s;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

#define SKIP_WITHOUT_GPU(n)                                                                      \
  if (cuda_device_count() < (n)) GTEST_SKIP() << "skipped: no GPU (needs " << (n) << ", has " \
                                              << cuda_device_count() << ")"

}  // namespace

// Same model, data and SGD updates: ATen's kernels and the harness's agree to float rounding, in the
// parameters and in every logged signal.
TEST(AtenStep, AgreesWithTheFlatlineKernelsInFp32) {
  Scenario s = tiny_gpt(1, 6);
  s.optimizer.kind = "sgd";
  s.optimizer.lr = 0.5;
  s.optimizer.weight_decay = 0;
  s.schedule.kind = "constant";
  const std::string a = temp_dir("aten-fp32"), f = temp_dir("flat-fp32");
  auto ra = run_ranks(with_kernels(s, "aten"), a);
  auto rf = run_ranks(with_kernels(s, "flatline"), f);
  ASSERT_EQ(ra[0].params.size(), rf[0].params.size());
  EXPECT_LT(max_abs_diff(ra[0].params, rf[0].params), 1e-5);
  const auto sa = steps_of(a, 0), sf = steps_of(f, 0);
  ASSERT_EQ(sa.size(), 6u);
  ASSERT_EQ(sf.size(), 6u);
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_NEAR(*sa[i].loss, *sf[i].loss, 1e-5) << "step " << i + 1;
    EXPECT_NEAR(*sa[i].grad_norm, *sf[i].grad_norm, 1e-4 * *sf[i].grad_norm) << "step " << i + 1;
    EXPECT_NEAR(*sa[i].local_grad_norm, *sf[i].local_grad_norm, 1e-4 * *sf[i].local_grad_norm);
    EXPECT_NEAR(*sa[i].param_norm, *sf[i].param_norm, 1e-5 * *sf[i].param_norm);
    EXPECT_NEAR(*sa[i].update_norm, *sf[i].update_norm, 1e-4 * *sf[i].update_norm);
    // an element or two may round to exactly 0 in one and not the other (GELU differs by ~1e-7)
    EXPECT_NEAR(*sa[i].grad_zero_frac, *sf[i].grad_zero_frac, 1e-4);
    EXPECT_EQ(*sa[i].loss_scale, 1.0);
    EXPECT_FALSE(*sa[i].overflow);
    EXPECT_EQ(sa[i].step, sf[i].step);
    EXPECT_EQ(*sa[i].opt_step, *sf[i].opt_step);
  }
  EXPECT_EQ(ra[0].losses.size(), 6u);
  EXPECT_NEAR(ra[0].losses.back(), rf[0].losses.back(), 1e-5);
}

// Two ranks over Gloo: identical parameters after every step (the run counts its own mismatches),
// and the same scenario twice gives identical telemetry.
TEST(AtenStep, TwoRanksStayIdenticalAndTelemetryIsDeterministic) {
  Scenario s = with_kernels(tiny_gpt(2, 6), "aten");
  s.eval_every = 3;
  const std::string a = temp_dir("aten-2a"), b = temp_dir("aten-2b");
  auto r = run_ranks(s, a);
  run_ranks(s, b);
  EXPECT_EQ(r[0].param_mismatches, 0);
  EXPECT_EQ(r[1].param_mismatches, 0);
  for (size_t i = 0; i < r[0].params.size(); ++i) ASSERT_EQ(r[0].params[i], r[1].params[i]) << "element " << i;
  EXPECT_NE(r[0].losses, r[1].losses);
  for (int rank = 0; rank < 2; ++rank) {
    auto da = deterministic_steps(a, rank), db = deterministic_steps(b, rank);
    ASSERT_EQ(da.size(), 8u);  // 6 steps + 2 evals
    EXPECT_EQ(da, db);
  }
  const auto st = steps_of(a, 0);
  EXPECT_NEAR(*st.back().loss_avg, (r[0].losses.back() + r[1].losses.back()) / 2, 1e-6);
}

// The loss_scale_collapse fault on real fp16 autocast and GradScaler kernels: the scale backs off,
// steps are skipped and the optimizer count stalls exactly as under the binary16 emulation.
TEST(AtenStep, OverflowStreakActsAsUnderTheEmulation) {
  Scenario s = overflow_streak(tiny_gpt(1, 10), 3, 4);
  const std::string a = temp_dir("aten-fp16"), e = temp_dir("emul-fp16");
  run_ranks(with_kernels(s, "aten"), a);
  run_ranks(with_kernels(s, "flatline"), e);
  const auto sa = steps_of(a, 0), se = steps_of(e, 0);
  ASSERT_EQ(sa.size(), 10u);
  ASSERT_EQ(se.size(), 10u);
  const std::vector<double> scale = {65536, 65536, 65536, 32768, 16384, 8192, 4096, 4096, 4096, 4096};
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(*sa[i].loss_scale, scale[i]) << "step " << i + 1;
    EXPECT_EQ(*sa[i].loss_scale, *se[i].loss_scale) << "step " << i + 1;
    EXPECT_EQ(*sa[i].overflow, *se[i].overflow) << "step " << i + 1;
    EXPECT_EQ(*sa[i].skipped, *se[i].skipped) << "step " << i + 1;
    EXPECT_EQ(*sa[i].opt_step, *se[i].opt_step) << "step " << i + 1;
    EXPECT_NEAR(*sa[i].loss, *se[i].loss, 2e-2) << "step " << i + 1;  // fp16 autocast vs binary16 rounding
  }
  EXPECT_TRUE(*sa[2].skipped);
  EXPECT_EQ(*sa.back().opt_step, 6);
}

// The scale clamp and the zeroed / skipped gradient of one rank act on the aten step too.
TEST(AtenStep, ClampZeroedBufferAndSkippedBackward) {
  Scenario s = with_kernels(tiny_gpt(2, 6), "aten");
  s.precision = "fp16";
  FaultSpec clamp;
  clamp.kind = "loss_scale_collapse";
  clamp.mode = "scale_clamped_low";
  clamp.at = 2;
  clamp.params["max_scale"] = 1.0 / 256;
  s.faults.push_back(clamp);
  FaultSpec zero;
  zero.kind = "zero_grad_rank";
  zero.mode = "zeroed_buffer";
  zero.at = 4;
  zero.target_rank = 1;
  zero.index = 1;
  s.faults.push_back(zero);
  const std::string d = temp_dir("aten-faults");
  run_ranks(s, d);
  const auto r0 = steps_of(d, 0), r1 = steps_of(d, 1);
  ASSERT_EQ(r1.size(), 6u);
  EXPECT_EQ(*r0[2].loss_scale, 1.0 / 256);  // clamped after step 2's update
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(*r1[i].local_grad_norm, 0.0) << "step " << i + 1;
    EXPECT_GT(*r0[i].local_grad_norm, 0.0) << "step " << i + 1;
  }
  EXPECT_GT(*r1[2].local_grad_norm, 0.0);

  Scenario k = with_kernels(tiny_gpt(2, 4), "aten");
  FaultSpec skip = zero;
  skip.mode = "skipped_backward";
  skip.at = 2;
  skip.index = 0;
  k.faults = {skip};
  const std::string e = temp_dir("aten-skip");
  run_ranks(k, e);
  const auto s1 = steps_of(e, 1);
  EXPECT_EQ(*s1[1].local_grad_norm, 0.0);
  EXPECT_GT(*steps_of(e, 0)[1].local_grad_norm, 0.0);
}

// Stopping and resuming reproduces the uninterrupted run's records bit for bit on the aten step
// (scaler state, optimizer moments, sampler restored), fp32 and fp16.
TEST(AtenStep, ResumedRunReproducesUninterruptedTelemetry) {
  for (const char* precision : {"fp32", "fp16"}) {
    Scenario s = with_kernels(tiny_gpt(2, 8), "aten");
    s.checkpoint_every = 2;
    s.precision = precision;
    s.loss_scale_growth_interval = 3;
    const std::string full = temp_dir("aten-full"), cut = temp_dir("aten-cut");
    run_ranks(s, full);
    Scenario r = s;
    r.restart_at = 5;
    run_ranks(r, cut);
    run_ranks(r, cut, /*resume=*/true);
    for (int rank = 0; rank < 2; ++rank) {
      auto a = deterministic_steps(full, rank), b = deterministic_steps(cut, rank);
      ASSERT_EQ(a.size(), 8u);
      ASSERT_EQ(b.size(), 9u);  // 1..5, then 5..8 from the checkpoint at 4
      EXPECT_EQ(std::vector<std::string>(b.begin(), b.begin() + 5), std::vector<std::string>(a.begin(), a.begin() + 5))
          << precision;
      EXPECT_EQ(std::vector<std::string>(b.begin() + 5, b.end()), std::vector<std::string>(a.begin() + 4, a.end()))
          << precision;
    }
  }
}

TEST(AtenStep, Bf16AutocastTrains) {
  Scenario s = with_kernels(tiny_gpt(1, 12), "aten");
  s.precision = "bf16";
  s.optimizer.lr = 1e-2;
  const std::string d = temp_dir("aten-bf16");
  auto r = run_ranks(s, d);
  const auto st = steps_of(d, 0);
  ASSERT_EQ(st.size(), 12u);
  for (const auto& x : st) {
    EXPECT_EQ(*x.loss_scale, 1.0);
    EXPECT_FALSE(*x.skipped);
    EXPECT_TRUE(std::isfinite(*x.loss));
  }
  EXPECT_LT(r[0].losses.back(), r[0].losses.front());
}

TEST(Placement, CudaWithoutAGpuIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  Scenario s = tiny_gpt(1, 2);
  s.device = "cuda";
  RankOptions o;
  o.scenario = s;
  o.run_dir = temp_dir("no-gpu");
  o.run_t0 = 1;
  try {
    train_rank(o);
    FAIL() << "trained on cuda without a GPU";
  } catch (const RankError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: device cuda, but this process sees no GPU"), std::string::npos)
        << e.what();
  }
}

TEST(Cuda, StepMatchesTheCpuAtenStep) {
  SKIP_WITHOUT_GPU(1);
  Scenario s = with_kernels(tiny_gpt(1, 6), "aten");
  s.optimizer.kind = "sgd";
  s.optimizer.lr = 0.5;
  s.schedule.kind = "constant";
  const std::string c = temp_dir("cpu"), g = temp_dir("gpu");
  auto rc = run_ranks(s, c);
  Scenario on_gpu = s;
  on_gpu.device = "cuda";
  auto rg = run_ranks(on_gpu, g);
  EXPECT_LT(max_abs_diff(rc[0].params, rg[0].params), 1e-4);
  const auto sc = steps_of(c, 0), sg = steps_of(g, 0);
  ASSERT_EQ(sg.size(), 6u);
  for (size_t i = 0; i < sg.size(); ++i) EXPECT_NEAR(*sg[i].loss, *sc[i].loss, 1e-4) << "step " << i + 1;
}

TEST(Cuda, Fp16OverflowStreakOnTheGpu) {
  SKIP_WITHOUT_GPU(1);
  Scenario s = overflow_streak(tiny_gpt(1, 8), 3, 3);
  s.device = "cuda";
  const std::string d = temp_dir("gpu-fp16");
  run_ranks(s, d);
  const auto st = steps_of(d, 0);
  ASSERT_EQ(st.size(), 8u);
  EXPECT_EQ(*st[2].loss_scale, 65536.0);
  EXPECT_TRUE(*st[2].skipped);
  EXPECT_EQ(*st[5].loss_scale, 8192.0);
  EXPECT_FALSE(*st[5].skipped);
  EXPECT_EQ(*st.back().opt_step, 5);
}

TEST(Cuda, NcclOneRankAndGlooTwoRanksOnOneGpu) {
  SKIP_WITHOUT_GPU(1);
  Scenario n = tiny_gpt(1, 4);
  n.device = "cuda";
  n.process_group = "nccl";  // a real ProcessGroupNCCL even for one rank
  auto rn = run_ranks(n, temp_dir("nccl1"));
  EXPECT_EQ(rn[0].last_step, 4);
  Scenario g = tiny_gpt(2, 4);
  g.device = "cuda";
  g.process_group = "gloo";
  auto rg = run_ranks(g, temp_dir("gloo-cuda"));
  EXPECT_EQ(rg[0].param_mismatches, 0);
  EXPECT_EQ(rg[0].params, rg[1].params);
}

TEST(Cuda, FewerGpusThanLocalRanksNamesBothCounts) {
  SKIP_WITHOUT_GPU(1);
  const int gpus = cuda_device_count();
  Scenario s = tiny_gpt(1, 2);
  s.device = "cuda";
  RankOptions o;
  o.scenario = s;
  o.run_dir = temp_dir("few-gpus");
  o.run_t0 = 1;
  o.local_world_size = gpus + 1;
  try {
    train_rank(o);
    FAIL() << "placed " << gpus + 1 << " NCCL ranks on " << gpus << " GPUs";
  } catch (const RankError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(gpus + 1) + " local ranks need " + std::to_string(gpus + 1) +
                                         " GPUs (one per rank: cuda:LOCAL_RANK), this machine has " +
                                         std::to_string(gpus)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace flatline::test
