// Conformance: every GPT scenario of the full suite, run through the real trainer (real ranks over c10d
// Gloo) and through the fleet simulator, gives the same discrete signals on every rank's every step
// record: the logged step (with a restart's re-run and a frozen logger), opt_step, skipped, overflow,
// lr, epoch, and which rank sent zeros. Both executors follow the same fault definitions and the same
// rules (faults/effects.h); this is where a second meaning would show.
//
// The model is shrunk (the signals above do not depend on its size) and, under fp16, the initial loss
// scale is 1: the simulator models natural overflow from its loss curve, the trainer gets it from a real
// model, and the two need not agree on the initial scale search; injected overflows and clamps must.
// A hang's collective timeout is 1.5 s and its block 3 s, so the trainer's run ends in seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "faults/effects.h"
#include "faults/scenario_file.h"
#include "sim/simulate/simulator.h"
#include "tests/sim/ranks.h"

namespace flatline::test {
namespace {
namespace fs = std::filesystem;

struct Signals {
  int64_t step, opt_step;
  bool skipped, overflow;
  double lr;
  int64_t epoch;
  bool zero;
  bool operator==(const Signals& o) const {
    return step == o.step && opt_step == o.opt_step && skipped == o.skipped && overflow == o.overflow &&
           lr == o.lr && epoch == o.epoch && zero == o.zero;
  }
};

std::ostream& operator<<(std::ostream& os, const Signals& s) {
  return os << "{step " << s.step << ", opt_step " << s.opt_step << ", skipped " << s.skipped << ", overflow "
            << s.overflow << ", lr " << s.lr << ", epoch " << s.epoch << ", zero " << s.zero << "}";
}

Signals signals(const Record& r) {
  return {r.step, r.opt_step.value_or(-1), r.skipped.value_or(false), r.overflow.value_or(false), r.lr.value_or(-1),
          r.epoch.value_or(-1), r.local_grad_norm.value_or(-1) == 0.0};
}

struct Collect : RecordSink {
  std::vector<std::vector<Signals>> ranks;
  explicit Collect(int world) : ranks(static_cast<size_t>(world)) {}
  void write(const Record& r) override {
    if (r.kind == RecordKind::step) ranks[static_cast<size_t>(r.rank)].push_back(signals(r));
  }
};

std::vector<std::string> gpt_suite() {
  std::vector<std::string> out;
  for (const char* dir : {"gpt", "healthy", "overlap"})
    for (const auto& e : fs::directory_iterator(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/suite/" + dir))
      if (e.path().extension() == ".yaml" && load_scenario_file(e.path().string()).model.kind == "gpt")
        out.push_back(std::string(dir) + "/" + e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

Scenario shrunk(const std::string& name) {
  Scenario s = load_scenario_file(std::string(FLATLINE_SOURCE_DIR) + "/scenarios/suite/" + name);
  s.model.n_layer = 1;
  s.model.n_head = 2;
  s.model.n_embd = 16;
  s.model.block_size = 16;
  s.batch_size = 2;
  s.eval_every = 0;
  if (s.precision == "fp16") s.loss_scale_init = 1;
  for (auto& f : s.faults) {
    if (f.kind == "run_not_alive" && f.mode == "hang") {
      s.collective_timeout_s = 1.5;
      f.params["timeout_s"] = 3;
    }
    // ranks as threads have no launcher to stop a stall: a short one, which both sides train through
    if (f.kind == "run_not_alive" && f.mode == "data_stall") f.params["timeout_s"] = 1;
  }
  return s;
}

// The trainer's step records per rank: both phases of a restart; a run that a hang ends is expected to fail.
std::vector<std::vector<Signals>> trained(const Scenario& s) {
  const std::string dir = temp_dir("conform");
  const bool ends_run = scenario_manifest(s, "").failure_expected();
  for (bool resume : {false, true}) {
    std::vector<std::string> errors;
    const auto res = run_ranks(s, dir, resume, /*keep_params=*/false, &errors);
    if (!ends_run)
      for (const auto& e : errors) EXPECT_EQ(e, "");
    if (!res[0].stopped_for_restart) break;
  }
  std::vector<std::vector<Signals>> out(static_cast<size_t>(s.world_size));
  for (int r = 0; r < s.world_size; ++r)
    for (const auto& rec : read_jsonl(dir + "/telemetry/rank-" + std::to_string(r) + ".jsonl", nullptr))
      if (rec.kind == RecordKind::step) out[static_cast<size_t>(r)].push_back(signals(rec));
  fs::remove_all(dir);
  return out;
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, TrainerAndSimulatorGiveTheSameDiscreteSignals) {
  const Scenario s = shrunk(GetParam());
  Collect sim(s.world_size);
  simulate(s, SimOptions{}, sim);
  const auto real = trained(s);
  for (int r = 0; r < s.world_size; ++r) {
    const auto& a = real[static_cast<size_t>(r)];
    const auto& b = sim.ranks[static_cast<size_t>(r)];
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a.size(), b.size()) << "rank " << r;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      ASSERT_EQ(a[i], b[i]) << "rank " << r << ", record " << i << " (trainer, then simulator)";
  }
}

INSTANTIATE_TEST_SUITE_P(Suite, Conformance, ::testing::ValuesIn(gpt_suite()), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

}  // namespace
}  // namespace flatline::test
