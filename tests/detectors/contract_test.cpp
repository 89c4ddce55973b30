// The contract every registered detector keeps (docs/DESIGN.md §2; detectors/detector.h), one test for
// all of them, as gloo's tests run every algorithm through the same checks:
//  - odd data never throws (NaN, inf, missing fields, negative and repeated steps, unknown ranks, events
//    and phases, a clock that runs backwards);
//  - the ranks' interleaving does not change the verdict (each rank's own order kept; without the world
//    size, any order that shows every rank early);
//  - silent on its healthy twin (the same run without the fault: pauses, fp16's initial scale search).
// A detector registered without its faulty stream below fails here: a new detector brings one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "detectors/registry.h"
#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

constexpr int kWorld = 4;
constexpr int64_t kOnset = 180;
constexpr int kAtFault = 2;  // the rank a per-rank fault targets

// The healthy twin: four ranks, fp16 with its initial scale search, checkpoint and eval pauses.
Spec healthy(uint64_t seed) {
  Spec sp;
  sp.world = kWorld;
  sp.seed = seed;
  sp.fp16 = true;
  sp.initial_overflows = 3;
  sp.checkpoint_at = {100, 200};
  sp.eval_at = {150};
  return sp;
}

// Each registered detector's fault, from step kOnset of the healthy twin.
const std::map<std::string, std::function<void(Spec&)>>& faults() {
  static const std::map<std::string, std::function<void(Spec&)>> f = {
      {"run_not_alive",
       [](Spec& sp) {
         sp.hang_at = kOnset;
         sp.hang_rank = kAtFault;
       }},
      {"lr_zero", [](Spec& sp) { sp.lr = [](int64_t step, bool, double h) { return step >= kOnset ? 0.0 : h; }; }},
      {"data_replay",
       [](Spec& sp) {  // from kOnset the loader cycles over the same 4 batches
         sp.batch_index = [](int64_t step, bool) { return step >= kOnset ? kOnset - 4 + (step - kOnset) % 4 : step - 1; };
       }},
      {"loss_scale_collapse",
       [](Spec& sp) { sp.overflow = [](int64_t step) { return step >= kOnset && step < kOnset + 17; }; }},
      {"zero_grad_rank",
       [](Spec& sp) {
         sp.local_grad_scale = [](int64_t step, int r) { return r == kAtFault && step >= kOnset ? 0.0 : 1.0; };
       }},
      {"straggler",
       [](Spec& sp) {  // the rank computes 40% longer; the others wait for it inside the all-reduce
         sp.mutate = [](Record& r) {
           if (!r.step_ms || !r.comm_ms || r.step < kOnset) return;
           const double extra = 0.4 * (*r.step_ms - *r.comm_ms);
           if (r.rank == kAtFault) r.step_ms = *r.step_ms + extra;
           else r.comm_ms = *r.comm_ms + extra, r.step_ms = *r.step_ms + extra;
         };
       }},
  };
  return f;
}

class Contract : public ::testing::TestWithParam<std::string> {};

TEST_P(Contract, OddDataNeverThrows) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const double odd[] = {nan, inf, -inf, -1.0, 0.0, 1e300, 1e-300, 3.0};
  const char* names[] = {"", "error", "resume", "run_end", "no_such_event", "checkpoint_load", "stopped"};
  const char* phases[] = {"", "compute", "collective", "checkpoint", "eval", "data", "???"};
  for (int world : {0, kWorld}) {
    DetectorConfig cfg;
    cfg.world_size = world;
    cfg.planned_steps = world ? 50 : 0;
    cfg.log_complete = world != 0;
    auto d = make_detector(GetParam(), cfg);
    std::vector<Record> block;
    for (int i = 0; i < 400; ++i) {
      Record r;
      r.kind = static_cast<RecordKind>(i % 4);
      r.rank = i % 13 == 5 ? -1 : i % 11 == 7 ? 9 : i % kWorld;
      r.step = i % 17 == 0 ? -3 : i % 19 == 0 ? int64_t{1} << 40 : i % 5 == 0 ? 7 : i / 2;
      r.t = i % 6 == 0 ? nan : i % 23 == 0 ? -5.0 : (i % 29 == 0 ? 1e12 : 100.0 - 0.1 * i);
      const double v = odd[i % 8];
      if (i % 3) {  // some fields present, some absent
        r.opt_step = i % 7 == 0 ? -1 : i / 3;
        r.loss = v, r.loss_avg = odd[(i + 1) % 8], r.lr = odd[(i + 2) % 8], r.grad_norm = odd[(i + 3) % 8];
        r.local_grad_norm = odd[(i + 4) % 8], r.grad_zero_frac = odd[(i + 5) % 8], r.param_norm = v;
        r.update_norm = odd[(i + 6) % 8], r.loss_scale = odd[(i + 7) % 8], r.overflow = i % 2, r.skipped = i % 4 == 1;
        r.batch_hash = static_cast<uint64_t>(i % 9), r.epoch = i % 7 - 1, r.samples_seen = i * 3 - 50;
        r.step_ms = v, r.comm_ms = odd[(i + 2) % 8], r.param_mismatches = i % 2;
        r.eval_loss = odd[(i + 3) % 8];
      }
      r.phase = phases[i % 7];
      r.name = names[i % 7];
      r.detail = i % 2 ? "Timed out waiting 30000ms" : "";
      if (i % 50 == 49) {
        EXPECT_NO_THROW(d->observe_block(block.data(), block.size())) << GetParam();
        block.clear();
        EXPECT_NO_THROW(d->advance(i % 100 == 99 ? nan : 200.0)) << GetParam();
      } else if (i % 2) {
        block.push_back(r);
      } else {
        EXPECT_NO_THROW(d->observe(r)) << GetParam();
      }
    }
    EXPECT_NO_THROW(d->finish(nan)) << GetParam();
    EXPECT_NO_THROW((void)d->finding()) << GetParam();
    EXPECT_NO_THROW((void)d->check()) << GetParam();
  }
}

TEST_P(Contract, SilentOnItsHealthyTwin) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const auto d = run_detector(GetParam(), interleave(generate(healthy(seed)), Order::chunked, seed), kWorld);
    const auto f = d->finding();
    EXPECT_FALSE(f) << GetParam() << " seed " << seed << ": " << (f && !f->evidence.empty() ? f->evidence[0] : "");
    EXPECT_NE(d->check().state, CheckState::fail) << GetParam();
  }
}

TEST_P(Contract, TheInterleavingOfRanksDoesNotChangeTheVerdict) {
  const auto fault = faults().find(GetParam());
  ASSERT_NE(fault, faults().end()) << GetParam() << " is registered without its faulty stream in this test";
  Spec sp = healthy(1);
  fault->second(sp);
  const auto rs = generate(sp);
  const auto ref = run_detector(GetParam(), interleave(rs, Order::by_time), kWorld)->finding();
  ASSERT_TRUE(ref) << GetParam() << " does not fire on its fault";
  EXPECT_GE(ref->detected_step, kOnset) << GetParam();
  for (int world : {kWorld, 0})
    for (auto o : {Order::by_time, Order::round_robin, Order::rank_first, Order::reversed, Order::chunked}) {
      // Without the world size the ranks seen so far are waited for: every order that shows each rank
      // early (one rank's whole stream first cannot say how many ranks there are).
      if (world == 0 && o == Order::rank_first) continue;
      const auto f = run_detector(GetParam(), interleave(rs, o, 7), world)->finding();
      ASSERT_TRUE(f) << GetParam() << " world " << world << " order " << static_cast<int>(o);
      EXPECT_TRUE(same_finding(*ref, *f)) << GetParam() << " world " << world << " order " << static_cast<int>(o);
    }
}

INSTANTIATE_TEST_SUITE_P(EveryRegisteredDetector, Contract, ::testing::ValuesIn(registered_detectors()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace flatline::testing
