// The side-by-side scoreboard (scoring/scoreboard.h) on hand-built manifests and detector outcomes:
// the first alarm decides, detection-only alarms are scored on detection, detector errors are their
// own verdict, and the renderings carry what CI needs.
#include "scoring/scoreboard.h"

#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

namespace flatline {
namespace {

Manifest lr_zero_run() {
  Manifest m;
  m.scenario = "lr-zero-gpt";
  m.seed = 7;
  m.faults.push_back({"lr_zero", "schedule_total_too_short", -1, 31, 160, 4.0});
  m.expect_cause = "lr_zero";
  m.expect_within_steps = 2;
  m.status = "completed";
  m.wall_s = 6;
  return m;
}

Manifest healthy_run(const std::string& name) {
  Manifest m;
  m.scenario = name;
  m.status = "completed";
  return m;
}

ExternalOutcome outcome(const std::string& name, std::vector<ExternalAlarm> alarms = {}, std::string error = "") {
  ExternalOutcome o;
  o.name = name;
  o.alarms = std::move(alarms);
  o.error = std::move(error);
  return o;
}

ExternalAlarm alarm(const std::string& cause, int64_t step, double t) {
  ExternalAlarm a;
  a.cause = cause;
  a.step = step;
  a.t = t;
  return a;
}

TEST(Scoreboard, NeverAlarmingGetsHealthyRunsRightAndEveryFaultMissed) {
  auto lr = score_external_run(lr_zero_run(), outcome("silent"));
  EXPECT_FALSE(lr.alarmed);
  EXPECT_FALSE(lr.detected);
  EXPECT_FALSE(lr.cause.correct);
  EXPECT_FALSE(lr.expect_met);
  EXPECT_EQ(lr.expect_detail, "expected lr_zero within 2 steps, got healthy");
  auto h = score_external_run(healthy_run("healthy-gpt"), outcome("silent"));
  EXPECT_TRUE(h.detected);
  EXPECT_TRUE(h.cause.correct);
  EXPECT_TRUE(h.expect_met);
  Scoreboard b = make_scoreboard({lr_zero_run(), healthy_run("healthy-gpt"), healthy_run("healthy-fp16-gpt")},
                                 {{lr}, {h}, {score_external_run(healthy_run("healthy-fp16-gpt"), outcome("silent"))}});
  ASSERT_EQ(b.summaries.size(), 1u);
  EXPECT_EQ(b.summaries[0].suite.correct, 2);
  EXPECT_EQ(b.summaries[0].detected, 2);
  EXPECT_EQ(b.summaries[0].faults_detected, 0);
  EXPECT_EQ(b.summaries[0].healthy_alarms, 0);
  EXPECT_EQ(b.summaries[0].expect_failures, 1);
}

TEST(Scoreboard, AlarmOnTheFirstRecordIsEarlyOnTheFaultAndFalseOnEveryHealthyRun) {
  auto lr = score_external_run(lr_zero_run(), outcome("eager", {alarm("lr_zero", 1, 0.5), alarm("lr_zero", 160, 4.0)}));
  EXPECT_TRUE(lr.early);
  EXPECT_FALSE(lr.detected);
  EXPECT_FALSE(lr.cause.correct);
  EXPECT_TRUE(lr.cause.false_alarm);
  EXPECT_EQ(lr.expect_detail, "false alarm: lr_zero at step 1 before active_from 31");
  EXPECT_EQ(lr.alarms.size(), 2u);  // the later, right one is reported, not scored
  auto h = score_external_run(healthy_run("healthy-fp16-gpt"), outcome("eager", {alarm("lr_zero", 1, 0.5)}));
  EXPECT_TRUE(h.cause.false_alarm);
  EXPECT_FALSE(h.detected);
  Scoreboard b = make_scoreboard({lr_zero_run(), healthy_run("healthy-fp16-gpt")}, {{lr}, {h}});
  const auto& s = b.summaries[0];
  EXPECT_EQ(s.early, 1);
  EXPECT_EQ(s.healthy_alarms, 1);
  ASSERT_EQ(s.alarmed_healthy.size(), 1u);
  EXPECT_EQ(s.alarmed_healthy[0], "healthy-fp16-gpt: lr_zero at step 1");
  EXPECT_EQ(s.suite.correct, 0);
  EXPECT_DOUBLE_EQ(s.suite.false_alarms_per_healthy_run, 1.0);
}

TEST(Scoreboard, DetectionOnlyAlarmIsScoredOnDetection) {
  auto r = score_external_run(lr_zero_run(), outcome("naive", {alarm("", 162, 4.5)}));
  EXPECT_TRUE(r.alarmed);
  EXPECT_FALSE(r.named);
  EXPECT_TRUE(r.detected);
  EXPECT_FALSE(r.cause.correct);  // it named nothing
  EXPECT_EQ(r.cause.diagnosis.cause, kUnnamedAlarm);
  EXPECT_EQ(*r.detect_latency_steps, 2);
  EXPECT_DOUBLE_EQ(*r.detect_latency_s, 0.5);
  EXPECT_TRUE(r.expect_met);
  auto late = score_external_run(lr_zero_run(), outcome("naive", {alarm("", 170, 5.0)}));
  EXPECT_FALSE(late.expect_met);
  EXPECT_EQ(late.expect_detail,
            "expected lr_zero within 2 steps (detection only), got alarm (no cause) at step 170: latency 10 > 2");
  auto fa = score_external_run(healthy_run("cosine-tail"), outcome("naive", {alarm("", 200, 5.0)}));
  EXPECT_TRUE(fa.cause.false_alarm);
  EXPECT_EQ(fa.expect_detail, "false alarm: alarm (no cause) at step 200 on a healthy run");
  Scoreboard b = make_scoreboard({lr_zero_run(), healthy_run("cosine-tail")}, {{r}, {fa}});
  EXPECT_FALSE(b.summaries[0].names_causes);
  EXPECT_EQ(b.summaries[0].detected, 1);
  ASSERT_EQ(b.summaries[0].detect_latency.count("lr_zero"), 1u);
  EXPECT_EQ(b.summaries[0].detect_latency.at("lr_zero").n, 1);
  EXPECT_DOUBLE_EQ(b.summaries[0].detect_latency.at("lr_zero").median_steps, 2);
}

TEST(Scoreboard, DetectorErrorIsItsOwnVerdict) {
  auto r = score_external_run(lr_zero_run(), outcome("broken", {alarm("lr_zero", 161, 4.1)}, "exited with status 3"));
  EXPECT_EQ(r.error, "exited with status 3");
  EXPECT_FALSE(r.cause.correct);
  EXPECT_FALSE(r.cause.false_alarm);
  EXPECT_FALSE(r.expect_met);
  EXPECT_EQ(r.expect_detail, "detector error: exited with status 3");
  Scoreboard b = make_scoreboard({lr_zero_run()}, {{r}});
  EXPECT_EQ(b.summaries[0].errors, 1);
  EXPECT_EQ(b.summaries[0].suite.confusion.at("lr_zero").at("error"), 1);
}

TEST(Scoreboard, BuiltinAndExternalSideBySideInTableJsonAndJunit) {
  Diagnosis d;
  d.cause = "lr_zero";
  d.detected_step = 161;
  d.detected_t = 4.1;
  d.evidence = {"lr = 0 since step 160"};
  std::vector<std::vector<DetectorRunScore>> rows = {
      {score_builtin_run(lr_zero_run(), d), score_external_run(lr_zero_run(), outcome("naive", {alarm("", 165, 4.6)})),
       score_external_run(lr_zero_run(), outcome("broken", {}, "never read stdin: 10 record(s) waiting for 30 s"))},
      {score_builtin_run(healthy_run("healthy-gpt"), Diagnosis{}),
       score_external_run(healthy_run("healthy-gpt"), outcome("naive", {alarm("", 40, 1.0)})),
       score_external_run(healthy_run("healthy-gpt"), outcome("broken"))}};
  Scoreboard b = make_scoreboard({lr_zero_run(), healthy_run("healthy-gpt")}, std::move(rows));
  b.corpus_id = "0123456789abcdef0123456789abcdef";
  b.corpus_dir = "runs";
  EXPECT_EQ(b.detectors, (std::vector<std::string>{"flatline", "naive", "broken"}));

  const std::string table = render_scoreboard(b);
  EXPECT_NE(table.find("lr-zero-gpt  lr_zero  lr_zero +1 ok  alarm +5 detected      error DETECTOR ERROR"), std::string::npos)
      << table;
  EXPECT_NE(table.find("naive     - (names none)    1/2 (50.0%)         1.00 (1 of 1)"), std::string::npos) << table;
  EXPECT_NE(table.find("false alarm on a healthy run: naive: healthy-gpt: alarm at step 40"), std::string::npos) << table;
  EXPECT_NE(table.find("detector error: broken on lr-zero-gpt: never read stdin"), std::string::npos) << table;
  EXPECT_NE(table.find("corpus: runs (2 runs, xxh3-128 0123456789abcdef0123456789abcdef)"), std::string::npos) << table;

  auto j = nlohmann::json::parse(to_json(b));
  EXPECT_EQ(j["summary"]["correct"], 2);  // the built-in suite's, as before
  EXPECT_EQ(j["corpus"]["id"], "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(j["detectors"]["naive"]["detection"]["faults_detected"], 1);
  EXPECT_EQ(j["detectors"]["naive"]["detection"]["healthy_alarms"], 1);
  EXPECT_EQ(j["detectors"]["naive"]["runs"][0]["result"], "detected");
  EXPECT_EQ(j["detectors"]["naive"]["runs"][0]["alarms"][0]["step"], 165);
  EXPECT_EQ(j["detectors"]["broken"]["errors"], 1);
  EXPECT_EQ(j["detectors"]["flatline"]["cause"]["summary"]["accuracy"], 1.0);

  const std::string x = to_junit(b);
  EXPECT_NE(x.find("<testsuites name=\"flatline\" tests=\"6\" failures=\"2\" errors=\"1\""), std::string::npos) << x;
  EXPECT_NE(x.find("<testsuite name=\"flatline.naive\" tests=\"2\" failures=\"2\" errors=\"0\""), std::string::npos) << x;
  EXPECT_NE(x.find("<failure message=\"expected lr_zero within 2 steps (detection only), got alarm (no cause) at step "
                   "165: latency 5 &gt; 2\""),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<error message=\"never read stdin: 10 record(s) waiting for 30 s\" type=\"detector_error\">"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<property name=\"onset_step\" value=\"160\"/>"), std::string::npos);
  EXPECT_NE(x.find("<property name=\"seed\" value=\"7\"/>"), std::string::npos);
  EXPECT_NE(x.find("<property name=\"latency_steps\" value=\"5\"/>"), std::string::npos);
}

// --confirm: each built-in diagnosis' confirmation judged against the truth, in the table, JSON, JUnit.
TEST(Scoreboard, ConfirmationsAreRightWhenTheyConfirmExactlyTheTrueDiagnoses) {
  Diagnosis right;
  right.cause = "lr_zero";
  right.onset_step = 158;
  right.detected_step = 159;
  Diagnosis wrong = right;
  wrong.cause = "data_replay";
  auto conf = [](const char* verdict, double margin, double needed) {
    RunConfirmation c;
    c.verdict = verdict;
    c.margin = margin;
    c.needed = needed;
    c.reason = std::string("because ") + verdict;
    const bool replayed = std::string(verdict) != "nothing to confirm";
    c.wall_s = replayed ? 6.5 : 0.1;
    c.steps_trained = replayed ? 243 : 0;
    return std::optional<RunConfirmation>(c);
  };
  auto board = [&](const Diagnosis& d, std::optional<RunConfirmation> c) {
    return make_scoreboard({lr_zero_run(), healthy_run("healthy-gpt")},
                           {{score_builtin_run(lr_zero_run(), d)}, {score_builtin_run(healthy_run("healthy-gpt"), Diagnosis{})}},
                           {c, conf("nothing to confirm", std::nan(""), std::nan(""))});
  };
  // a true diagnosis confirmed, a wrong one not confirmed: right
  Scoreboard b = board(right, conf("confirmed", 0.0274, 0.0034));
  EXPECT_EQ(b.confirmations_right, 2);
  EXPECT_EQ(b.confirmations_judged, 2);
  EXPECT_EQ(board(wrong, conf("not confirmed", 0.0, 0.0027)).confirmations_right, 2);
  // the other way round, or ambiguous: wrong
  EXPECT_FALSE(board(wrong, conf("confirmed", 0.03, 0.003)).confirmations[0]->right);
  EXPECT_FALSE(board(right, conf("not confirmed", 0.0, 0.003)).confirmations[0]->right);
  EXPECT_FALSE(board(right, conf("ambiguous", std::nan(""), std::nan(""))).confirmations[0]->right);
  // without --confirm nothing of it is shown
  EXPECT_EQ(render_scoreboard(make_scoreboard({lr_zero_run()}, {{score_builtin_run(lr_zero_run(), right)}})).find("confirmed"),
            std::string::npos);

  const std::string table = render_scoreboard(b);
  EXPECT_NE(table.find("== confirmed: each diagnosis replayed with its cause repaired (flatline confirm) =="),
            std::string::npos) << table;
  EXPECT_NE(table.find("lr-zero-gpt  lr_zero    confirmed             0.0274    0.0034     243     6.5  right"),
            std::string::npos) << table;
  EXPECT_NE(table.find("confirmations right: 2/2 (243 replayed steps, 6.6 s)"), std::string::npos) << table;
  const Scoreboard bad = board(right, conf("not confirmed", 0.001, 0.003));
  EXPECT_NE(render_scoreboard(bad).find("WRONG"), std::string::npos);
  EXPECT_NE(render_scoreboard(bad).find("  lr-zero-gpt: because not confirmed"), std::string::npos);

  auto j = nlohmann::json::parse(to_json(b));
  EXPECT_EQ(j["confirmations"]["right"], 2);
  EXPECT_EQ(j["confirmations"]["runs"][0]["verdict"], "confirmed");
  EXPECT_EQ(j["confirmations"]["runs"][0]["margin"], 0.0274);
  EXPECT_TRUE(j["confirmations"]["runs"][1]["margin"].is_null());
  EXPECT_EQ(j["detectors"]["flatline"]["runs"][0]["confirmed"]["right"], true);

  const std::string x = to_junit(b);
  EXPECT_NE(x.find("<property name=\"confirmed\" value=\"confirmed\"/>"), std::string::npos) << x;
  EXPECT_NE(x.find("<property name=\"confirm_margin\" value=\"0.0274\"/>"), std::string::npos) << x;
  EXPECT_NE(x.find("failures=\"0\""), std::string::npos) << x;
  const std::string xb = to_junit(bad);  // the expectation met, the confirmation wrong: a failure
  EXPECT_NE(xb.find("<testsuites name=\"flatline\" tests=\"2\" failures=\"1\""), std::string::npos) << xb;
  EXPECT_NE(xb.find("type=\"confirmation\">because not confirmed</failure>"), std::string::npos) << xb;
}

}  // namespace
}  // namespace flatline

namespace flatline {
namespace {

// An external unexplained_plateau is scored as the built-in one: a wrong cause (but a detection) on a
// faulted run, a false alarm on a healthy one.
TEST(Scoreboard, AnExternalUnexplainedPlateauIsScoredAsTheBuiltinOne) {
  Diagnosis d;
  d.cause = "unexplained_plateau";
  d.detected_step = 160;
  d.detected_t = 4.0;
  for (const Manifest& m : {lr_zero_run(), healthy_run("healthy-gpt")}) {
    const auto builtin = score_builtin_run(m, d);
    const auto ext = score_external_run(m, outcome("ext", {alarm("unexplained_plateau", 160, 4.0)}));
    EXPECT_EQ(ext.cause.correct, builtin.cause.correct) << m.scenario;
    EXPECT_EQ(ext.cause.false_alarm, builtin.cause.false_alarm) << m.scenario;
    EXPECT_EQ(ext.detected, builtin.detected) << m.scenario;
    EXPECT_EQ(ext.alarmed, builtin.alarmed) << m.scenario;
    EXPECT_TRUE(ext.named);
    EXPECT_EQ(ext.cause.diagnosis.cause, "unexplained_plateau");
  }
  EXPECT_TRUE(score_external_run(healthy_run("h"), outcome("ext", {alarm("unexplained_plateau", 10, 1.0)})).cause.false_alarm);
  EXPECT_FALSE(score_external_run(lr_zero_run(), outcome("ext", {alarm("unexplained_plateau", 160, 4.0)})).cause.correct);
}

}  // namespace
}  // namespace flatline
