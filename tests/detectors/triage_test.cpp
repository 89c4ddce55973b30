// Triage: walks the checklist in order; healthy runs say healthy with every check passing,
// overlapping faults report every finding with the earlier checklist cause as the diagnosis,
// missing fields say what to log; to_text / to_json carry it all.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "detectors/triage.h"
#include "tests/detectors/stream.h"

namespace flatline::testing {
namespace {

Diagnosis triage(const Spec& sp, int world, Order o = Order::by_time, std::vector<Finding>* announced = nullptr) {
  Triage t(DetectorConfig{world});
  if (announced) t.on_finding([announced](const Finding& f) { announced->push_back(f); });
  double t_end = 0;
  for (const auto& r : interleave(generate(sp), o)) {
    t.observe(r);
    if (std::isfinite(r.t)) t_end = r.t;
  }
  t.finish(t_end);
  return t.diagnosis();
}

TEST(Triage, ChecklistOrder) {
  std::vector<std::string> rows;  // the table's checklist rows, in table order (run/causes.h)
  for (const Cause& c : cause_table())
    if (c.kind == CauseKind::checklist) rows.push_back(c.id);
  EXPECT_EQ(checklist_causes(), rows);
  const Diagnosis d = Triage().diagnosis();  // the triage walks them in that order
  ASSERT_EQ(d.checklist.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(d.checklist[i].cause, rows[i]);
  for (const auto& c : checklist_causes()) EXPECT_EQ(make_detector(c, {})->cause(), c);
  EXPECT_THROW(make_detector("no_such_cause", {}), std::invalid_argument);
}

TEST(Triage, HealthyRunPassesEveryCheck) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Spec sp;
    sp.seed = seed;
    sp.world = 4;
    sp.fp16 = true;
    sp.initial_overflows = 3;
    sp.checkpoint_at = {100, 200};
    sp.eval_at = {150};
    sp.restart_after = 230;
    sp.restart_from = 200;
    auto d = triage(sp, 4);
    EXPECT_EQ(d.cause, "healthy");
    EXPECT_TRUE(d.findings.empty());
    ASSERT_EQ(d.checklist.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(d.checklist[i].cause, checklist_causes()[i]);
      EXPECT_EQ(d.checklist[i].state, CheckState::pass) << d.checklist[i].cause << ": " << d.checklist[i].detail;
    }
    EXPECT_EQ(d.last_step, 300);
    EXPECT_TRUE(d.plateau.known);
  }
}

Spec lr_zero_and_zero_grad_rank() {
  Spec sp;
  sp.steps = 400;
  sp.checkpoint_at = {300};
  sp.restart_after = 350;
  sp.restart_from = 300;
  sp.lr = [](int64_t, bool after_restart, double h) { return after_restart ? 0.0 : h; };  // lr_zero at 301
  sp.local_grad_scale = [](int64_t step, int r) { return r == 1 && step >= 150 ? 0.0 : 1.0; };  // from 150
  return sp;
}

TEST(Triage, OverlappingFaultsReportBothPrimaryByChecklistOrder) {
  std::vector<Finding> announced;
  auto d = triage(lr_zero_and_zero_grad_rank(), 2, Order::by_time, &announced);
  // zero_grad_rank fired first (step 151) but lr_zero comes earlier in the checklist
  EXPECT_EQ(d.cause, "lr_zero");
  EXPECT_EQ(d.rank, -1);
  EXPECT_EQ(d.onset_step, 301);
  EXPECT_EQ(d.detected_step, 302);
  EXPECT_EQ(d.evidence, std::vector<std::string>{"lr = 0 since step 301 (peak 3.0e-03 at step 21)"});
  ASSERT_EQ(d.findings.size(), 2u);
  EXPECT_EQ(d.findings[0].cause, "lr_zero");
  EXPECT_EQ(d.findings[1].cause, "zero_grad_rank");
  EXPECT_EQ(d.findings[1].rank, 1);
  EXPECT_EQ(d.findings[1].onset_step, 150);
  EXPECT_EQ(d.findings[1].detected_step, 151);
  // announced once each, in the order they fired
  ASSERT_EQ(announced.size(), 2u);
  EXPECT_EQ(announced[0].cause, "zero_grad_rank");
  EXPECT_EQ(announced[1].cause, "lr_zero");
  EXPECT_EQ(d.checklist[1].state, CheckState::fail);
  EXPECT_EQ(d.checklist[1].detail, "lr = 0 since step 301 (peak 3.0e-03 at step 21)");
  EXPECT_EQ(d.checklist[4].state, CheckState::fail);
  EXPECT_EQ(d.checklist[0].state, CheckState::pass);
  EXPECT_EQ(d.checklist[2].state, CheckState::pass);
  EXPECT_EQ(d.checklist[3].state, CheckState::pass);
}

// Blocks of records (the detectors on two threads when a block holds >= 4096 records) give the same
// diagnosis as records one at a time.
TEST(Triage, BlocksGiveTheSameDiagnosisAsSingleRecords) {
  Spec sp = lr_zero_and_zero_grad_rank();
  sp.world = 16;
  sp.local_grad_scale = [](int64_t step, int r) { return r == 11 && step >= 150 ? 0.0 : 1.0; };
  auto rs = interleave(generate(sp), Order::by_time);
  ASSERT_GT(rs.size(), 2 * 5000u);  // at least two blocks take the two-thread path
  DetectorConfig cfg;
  cfg.world_size = 16;
  Triage one(cfg), blocks(cfg);
  for (const auto& r : rs) one.observe(r);
  for (size_t at = 0; at < rs.size(); at += 5000)
    blocks.observe_block(std::vector<Record>(rs.begin() + static_cast<std::ptrdiff_t>(at),
                                             rs.begin() + static_cast<std::ptrdiff_t>(std::min(rs.size(), at + 5000))));
  one.finish(rs.back().t);
  blocks.finish(rs.back().t);
  EXPECT_EQ(to_json(blocks.diagnosis()), to_json(one.diagnosis()));
  const Diagnosis d = one.diagnosis();
  EXPECT_EQ(d.cause, "lr_zero") << to_text(d);
  auto z = std::find_if(d.findings.begin(), d.findings.end(), [](const Finding& f) { return f.cause == "zero_grad_rank"; });
  ASSERT_NE(z, d.findings.end());
  EXPECT_EQ(z->rank, 11);
}

TEST(Triage, SameDiagnosisWhateverTheInterleaving) {
  auto ref = triage(lr_zero_and_zero_grad_rank(), 2);
  for (auto o : {Order::round_robin, Order::rank_first, Order::reversed, Order::chunked}) {
    auto d = triage(lr_zero_and_zero_grad_rank(), 2, o);
    EXPECT_EQ(to_json(d), to_json(ref)) << static_cast<int>(o);
  }
}

TEST(Triage, HangComesFirst) {
  Spec sp;
  sp.hang_at = 160;
  sp.local_grad_scale = [](int64_t step, int r) { return r == 0 && step >= 100 ? 0.0 : 1.0; };
  auto d = triage(sp, 2);
  EXPECT_EQ(d.cause, "run_not_alive");
  EXPECT_EQ(d.onset_step, 160);
  EXPECT_EQ(d.detected_step, 160);
  ASSERT_EQ(d.findings.size(), 2u);
  EXPECT_EQ(d.findings[1].cause, "zero_grad_rank");
  EXPECT_EQ(d.findings[1].rank, 0);
}

TEST(Triage, MissingFieldsSayWhatToLog) {
  Spec sp;
  sp.heartbeats = false;
  sp.with_t = false;
  sp.lr_field = sp.update_norm = sp.batch_hash = sp.local_grad = sp.loss_scale = false;
  sp.mutate = [](Record& r) { r.overflow.reset(), r.skipped.reset(); };
  auto d = triage(sp, 2, Order::round_robin);
  EXPECT_EQ(d.cause, "healthy");
  const std::vector<std::pair<CheckState, std::string>> want = {
      {CheckState::cannot_run, "missing heartbeats and t: log a wall-clock heartbeat from a watchdog thread"},
      {CheckState::cannot_run, "missing lr: log the learning rate per step"},
      {CheckState::cannot_run, "missing batch_hash: log a hash of each batch's sample ids"},
      {CheckState::cannot_run,
       "missing loss_scale: log the loss scale (GradScaler.get_scale()) and skipped/overflow steps"},
      {CheckState::cannot_run, "missing local_grad_norm: log each rank's grad norm before the all-reduce"},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(d.checklist[i].state, want[i].first) << i;
    EXPECT_EQ(d.checklist[i].detail, want[i].second) << i;
  }
  const std::string text = to_text(d);
  EXPECT_NE(text.find("lr_zero              cannot run  missing lr: log the learning rate per step"), std::string::npos) << text;
}

TEST(Triage, TextAndJson) {
  auto d = triage(lr_zero_and_zero_grad_rank(), 2);
  const std::string text = to_text(d);
  for (const char* want :
       {"diagnosis: lr_zero  (confidence 0.95)\n", "  onset step 301, detected at step 302 (t = ",
        "  - lr = 0 since step 301 (peak 3.0e-03 at step 21)\n", "  also: zero_grad_rank on rank 1, onset step 150",
        "checklist:\n", "  1. run_not_alive        pass        steps advancing", "  2. lr_zero              FAIL",
        "  5. zero_grad_rank       FAIL", "plateau: loss ", "records: "})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;

  auto j = nlohmann::json::parse(to_json(d));
  EXPECT_EQ(j["cause"], "lr_zero");
  EXPECT_EQ(j["onset_step"], 301);
  EXPECT_EQ(j["detected_step"], 302);
  EXPECT_DOUBLE_EQ(j["detected_t"].get<double>(), d.detected_t);
  EXPECT_EQ(j["findings"].size(), 2u);
  EXPECT_EQ(j["findings"][1]["rank"], 1);
  EXPECT_EQ(j["checklist"][1]["state"], "fail");
  EXPECT_EQ(j["checklist"][0]["state"], "pass");
  EXPECT_EQ(j["plateau"]["known"], true);
  EXPECT_EQ(j["last_step"], 400);

  Diagnosis healthy;
  EXPECT_NE(to_text(healthy).find("diagnosis: healthy (no cause found)"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(to_json(healthy))["detected_t"].is_null());
}

// diagnosis.json read back (flatline confirm reads a run's diagnosis, never its manifest).
TEST(Triage, DiagnosisJsonReadsBack) {
  const auto d = triage(lr_zero_and_zero_grad_rank(), 2);
  const Diagnosis b = diagnosis_from_json(to_json(d), "diagnosis.json");
  EXPECT_EQ(b.cause, d.cause);
  EXPECT_EQ(b.rank, d.rank);
  EXPECT_EQ(b.onset_step, 301);
  EXPECT_EQ(b.detected_step, 302);
  EXPECT_DOUBLE_EQ(b.detected_t, d.detected_t);
  EXPECT_EQ(b.evidence, d.evidence);
  EXPECT_EQ(b.plateau.flat, d.plateau.flat);
  EXPECT_EQ(b.plateau.detail, d.plateau.detail);
  EXPECT_EQ(b.last_step, 400);
  EXPECT_TRUE(std::isnan(diagnosis_from_json(to_json(Diagnosis{}), "h.json").detected_t));  // null
  auto err = [](const std::string& text) {
    try {
      diagnosis_from_json(text, "d.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("{\"rank\": 1}"), "d.json: no \"cause\": not a flatline diagnosis");
  EXPECT_EQ(err("{\"cause\": \"lr_zero\", \"onset_step\": \"x\"}"), "d.json: \"onset_step\" has the wrong type (string)");
  EXPECT_EQ(err("{\"cause\""), "d.json: not JSON (byte 9): expected a diagnosis object");
}

// --- unexplained_plateau (docs/DESIGN.md §2) ------------------------------------------------------
namespace unexplained {

// One rank's step records: lr 1e-3, grad norm 1, loss from `loss(step)`; update_norm from `update`.
Diagnosis run(int64_t steps, const std::function<double(int64_t)>& loss,
              const std::function<std::optional<double>(int64_t)>& update = {}) {
  Triage t;
  for (int64_t s = 1; s <= steps; ++s) {
    Record r;
    r.step = s;
    r.loss = loss(s);
    r.lr = 1e-3;
    r.grad_norm = 1.0;
    r.param_norm = 30.0 + 0.001 * static_cast<double>(s);
    if (update) r.update_norm = update(s);
    t.observe(r);
  }
  t.finish(0);
  return t.diagnosis();
}
double noise(int64_t s) { return 0.004 * std::sin(1.7 * static_cast<double>(s)) * std::cos(0.37 * static_cast<double>(s)); }

TEST(Triage, AFlatLossThatNeverDescendedIsUnexplainedWithLnK) {
  Diagnosis d = run(100, [](int64_t s) { return std::log(4.0) + noise(s); });
  EXPECT_EQ(d.cause, "unexplained_plateau") << to_text(d);
  EXPECT_EQ(d.onset_step, 1);
  EXPECT_EQ(d.detected_step, 40);
  ASSERT_GE(d.evidence.size(), 3u);
  EXPECT_EQ(d.evidence[0].substr(0, 32), "the loss never descended: loss 1");
  EXPECT_EQ(d.evidence[1].substr(0, 39), "loss 1.3863 = ln 4 (1.3863): the model ");
  EXPECT_EQ(d.evidence.back(),
            "could not check: run_not_alive (missing heartbeats and t: log a wall-clock heartbeat from a watchdog "
            "thread); data_replay (missing batch_hash: log a hash of each batch's sample ids); loss_scale_collapse "
            "(missing loss_scale: log the loss scale (GradScaler.get_scale()) and skipped/overflow steps); "
            "zero_grad_rank (missing local_grad_norm: log each rank's grad norm before the all-reduce)");
  EXPECT_NE(to_text(d).find("diagnosis: unexplained_plateau"), std::string::npos);
  EXPECT_TRUE(d.plateau.never_descended);
  // A level that is no ln K says nothing about classes.
  d = run(100, [](int64_t s) { return 1.5 + noise(s); });
  EXPECT_EQ(d.cause, "unexplained_plateau");
  EXPECT_EQ(d.evidence[1].substr(0, 16), "could not check:");
}

TEST(Triage, ADescentThenAFlatLossStaysHealthy) {
  Diagnosis d = run(300, [](int64_t s) { return 2.0 + 3.0 * std::exp(-static_cast<double>(s) / 20.0) + noise(s); });
  EXPECT_TRUE(d.plateau.flat) << d.plateau.detail;
  EXPECT_FALSE(d.plateau.never_descended);
  EXPECT_EQ(d.cause, "healthy") << to_text(d);
  // Converged at ln 4 after descending: flat at the prior, but it descended to get there: healthy.
  d = run(300, [](int64_t s) { return std::log(4.0) + 2.0 * std::exp(-static_cast<double>(s) / 20.0) + noise(s); });
  EXPECT_EQ(d.cause, "healthy") << to_text(d);
}

TEST(Triage, ParametersThatDoNotMoveAreUnexplained) {
  // The loss even descends a little (noise, data order): the update norm says nothing is trained.
  Diagnosis d = run(60, [](int64_t s) { return 2.0 + noise(s); }, [](int64_t s) -> std::optional<double> {
    return s >= 11 ? 0.0 : 0.01;
  });
  EXPECT_EQ(d.cause, "unexplained_plateau") << to_text(d);
  EXPECT_EQ(d.onset_step, 11);
  EXPECT_EQ(d.detected_step, 13);
  EXPECT_EQ(d.evidence[0].substr(0, 85),
            "update norm 0 on 3 applied steps since step 11 while lr = 1.0e-03 and grad norm = 1, ");
  // Moving parameters: no verdict from that.
  d = run(60, [](int64_t s) { return 2.0 + 3.0 * std::exp(-static_cast<double>(s) / 10.0) + noise(s); },
          [](int64_t) -> std::optional<double> { return 0.01; });
  EXPECT_EQ(d.cause, "healthy");
}

TEST(Triage, AChecklistCauseExplainsTheFlatLoss) {
  // lr at 0 from the start: lr_zero names it, not unexplained_plateau.
  Triage t;
  for (int64_t s = 1; s <= 100; ++s) {
    Record r;
    r.step = s;
    r.loss = 2.0 + noise(s);
    r.lr = 0.0;
    r.grad_norm = 1.0;
    t.observe(r);
  }
  t.finish(0);
  EXPECT_EQ(t.diagnosis().cause, "lr_zero");
}

}  // namespace unexplained

}  // namespace
}  // namespace flatline::testing
