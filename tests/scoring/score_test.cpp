// Scoring: per-run verdicts, latency, expectations, suite aggregates and the three renderings, on
// hand-built manifests and diagnoses with exact expected values.
#include "scoring/score.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace flatline {
namespace {

Manifest faulty(const std::string& kind, int rank, int64_t active_from, int64_t onset, double onset_t = NAN,
                int64_t within = 5) {
  Manifest m;
  m.scenario = "s-" + kind;
  m.faults.push_back({kind, "mode", rank, active_from, onset, onset_t});
  m.expect_cause = kind;
  m.expect_rank = kind == "zero_grad_rank" ? rank : -1;
  m.expect_within_steps = within;
  m.status = "completed";
  m.wall_s = 12.5;
  return m;
}

Manifest healthy_manifest(const std::string& name = "clean") {
  Manifest m;
  m.scenario = name;
  m.expect_cause = "healthy";
  m.status = "completed";
  return m;
}

Diagnosis diag(const std::string& cause, int64_t step, double t = NAN, int rank = -1) {
  Diagnosis d;
  d.cause = cause;
  d.rank = rank;
  d.detected_step = step;
  d.detected_t = t;
  d.onset_step = step;
  d.confidence = 0.9;
  return d;
}

TEST(Score, CorrectCauseWithinExpectation) {
  RunScore r = score_run(faulty("lr_zero", -1, 52, 400, 80.0), diag("lr_zero", 403, 81.5));
  EXPECT_TRUE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_EQ(r.truth_cause, "lr_zero");
  EXPECT_EQ(r.active_from, 52);
  EXPECT_EQ(r.onset_step, 400);
  ASSERT_TRUE(r.latency_steps);
  EXPECT_EQ(*r.latency_steps, 3);
  ASSERT_TRUE(r.latency_s);
  EXPECT_DOUBLE_EQ(*r.latency_s, 1.5);
  EXPECT_TRUE(r.expect_met);
  EXPECT_EQ(r.expect_detail, "");
  EXPECT_EQ(r.run_status, "completed");
  EXPECT_DOUBLE_EQ(r.wall_s, 12.5);
}

TEST(Score, EarlyWarningAfterActiveFromIsCorrectWithNegativeLatency) {
  RunScore r = score_run(faulty("lr_zero", -1, 52, 400, 80.0), diag("lr_zero", 300, 60.0));
  EXPECT_TRUE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_EQ(*r.latency_steps, -100);
  EXPECT_DOUBLE_EQ(*r.latency_s, -20.0);
  EXPECT_TRUE(r.expect_met);
}

TEST(Score, LatencySecondsNeedAFiniteOnsetTime) {
  RunScore r = score_run(faulty("lr_zero", -1, 52, 400), diag("lr_zero", 402, 81.5));
  EXPECT_EQ(*r.latency_steps, 2);
  EXPECT_FALSE(r.latency_s);
  r = score_run(faulty("lr_zero", -1, 52, 400, 80.0), diag("lr_zero", 402));  // detected_t unknown
  EXPECT_FALSE(r.latency_s);
}

TEST(Score, WrongCauseIsAMissNotAFalseAlarm) {
  RunScore r = score_run(faulty("lr_zero", -1, 52, 400), diag("data_replay", 410));
  EXPECT_FALSE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_FALSE(r.expect_met);
  EXPECT_EQ(r.expect_detail, "expected lr_zero within 5 steps, got data_replay at step 410");
}

TEST(Score, HealthyDiagnosisOnAFaultyRunIsAMiss) {
  RunScore r = score_run(faulty("lr_zero", -1, 52, 400), Diagnosis{});
  EXPECT_FALSE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_FALSE(r.latency_steps);
  EXPECT_EQ(r.expect_detail, "expected lr_zero within 5 steps, got healthy");
}

TEST(Score, ZeroGradRankMustNameTheRank) {
  Manifest m = faulty("zero_grad_rank", 1, 100, 100);
  RunScore r = score_run(m, diag("zero_grad_rank", 102, NAN, 1));
  EXPECT_TRUE(r.correct);
  EXPECT_TRUE(r.expect_met);
  r = score_run(m, diag("zero_grad_rank", 102, NAN, 0));
  EXPECT_FALSE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_EQ(r.expect_detail,
            "expected zero_grad_rank rank 1 within 5 steps, got zero_grad_rank rank 0 at step 102");
}

TEST(Score, RankIgnoredForCausesThatAreNotRankSpecific) {
  // A hang targets rank 1, but run_not_alive is a property of the whole run.
  RunScore r = score_run(faulty("run_not_alive", 1, 200, 200), diag("run_not_alive", 203, NAN, 0));
  EXPECT_TRUE(r.correct);
  EXPECT_TRUE(r.expect_met);
}

TEST(Score, DetectionBeforeActiveFromIsAFalseAlarm) {
  RunScore r = score_run(faulty("data_replay", -1, 51, 51), diag("data_replay", 40));
  EXPECT_FALSE(r.correct);
  EXPECT_TRUE(r.false_alarm);
  EXPECT_FALSE(r.expect_met);
  EXPECT_EQ(*r.latency_steps, -11);
  EXPECT_EQ(r.expect_detail, "false alarm: data_replay at step 40 before active_from 51");
  // At active_from exactly: in time.
  r = score_run(faulty("data_replay", -1, 51, 51), diag("data_replay", 51));
  EXPECT_TRUE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_EQ(*r.latency_steps, 0);
}

TEST(Score, AnyDiagnosisOnAHealthyRunIsAFalseAlarm) {
  RunScore r = score_run(healthy_manifest(), Diagnosis{});
  EXPECT_TRUE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_TRUE(r.expect_met);
  EXPECT_EQ(r.truth_cause, "healthy");
  EXPECT_EQ(r.truth_rank, -1);

  r = score_run(healthy_manifest(), diag("loss_scale_collapse", 77));
  EXPECT_FALSE(r.correct);
  EXPECT_TRUE(r.false_alarm);
  EXPECT_FALSE(r.expect_met);
  EXPECT_FALSE(r.latency_steps);
  EXPECT_EQ(r.expect_detail, "false alarm: loss_scale_collapse at step 77 on a healthy run");
}

TEST(Score, ExpectWithinStepsBoundary) {
  Manifest m = faulty("lr_zero", -1, 52, 400, NAN, 5);
  RunScore r = score_run(m, diag("lr_zero", 405));
  EXPECT_TRUE(r.correct);
  EXPECT_TRUE(r.expect_met);  // latency 5 <= 5
  r = score_run(m, diag("lr_zero", 406));
  EXPECT_TRUE(r.correct);     // still the right answer, just late
  EXPECT_FALSE(r.expect_met);
  EXPECT_EQ(r.expect_detail, "expected lr_zero within 5 steps, latency 6 > 5");
}

TEST(Score, FirstFaultIsTheTruth) {
  Manifest m = faulty("loss_scale_collapse", -1, 10, 20);
  m.faults.push_back({"lr_zero", "m", -1, 5, 5, NAN});
  RunScore r = score_run(m, diag("loss_scale_collapse", 21));
  EXPECT_TRUE(r.correct);
  EXPECT_EQ(r.truth_cause, "loss_scale_collapse");
}

TEST(Score, FailedRunMissesItsExpectationUnlessDeathWasExpected) {
  Manifest m = faulty("lr_zero", -1, 52, 400);
  m.status = "failed";
  m.error = "rank 1: out of memory";
  RunScore r = score_run(m, diag("lr_zero", 401));
  EXPECT_TRUE(r.harness_error);  // the run proves nothing about the detector, either way
  EXPECT_FALSE(r.correct);
  EXPECT_FALSE(r.false_alarm);
  EXPECT_FALSE(r.expect_met);
  EXPECT_EQ(r.expect_detail, "harness error: run failed (expected lr_zero within 5 steps): rank 1: out of memory");

  Manifest hang = faulty("run_not_alive", 1, 300, 300);
  hang.status = "failed";
  hang.faults[0].ends_run = true;  // a hang ends the run by design
  hang.error = "collective timeout after 30 s";
  r = score_run(hang, diag("run_not_alive", 301));
  EXPECT_TRUE(r.correct);
  EXPECT_TRUE(r.expect_met);
}

TEST(Score, ScenarioExpectationThatDisagreesWithItsFaultIsReported) {
  Manifest m = faulty("lr_zero", -1, 52, 400);
  m.expect_cause = "data_replay";
  RunScore r = score_run(m, diag("lr_zero", 401));
  EXPECT_TRUE(r.correct);
  EXPECT_FALSE(r.expect_met);
  EXPECT_EQ(r.expect_detail,
            "expected data_replay within 5 steps, got lr_zero at step 401 (which matches the injected fault)");
}

SuiteScore example_suite() {
  std::vector<RunScore> runs;
  // lr_zero: five correct runs, latencies 1, 2, 3, 4, 10 steps and 0.5, 1, 1.5, 2, 5 s.
  int k = 0;
  for (int lat : {3, 1, 10, 4, 2}) {
    Manifest m = faulty("lr_zero", -1, 52, 400, 100.0, 20);
    m.scenario = "lr" + std::to_string(k++);
    runs.push_back(score_run(m, diag("lr_zero", 400 + lat, 100.0 + lat / 2.0)));
  }
  // lr_zero misdiagnosed as data_replay.
  {
    Manifest m = faulty("lr_zero", -1, 52, 400);
    m.scenario = "lr-missed";
    runs.push_back(score_run(m, diag("data_replay", 420)));
  }
  // data_replay detected early (false alarm on a faulty run).
  {
    Manifest m = faulty("data_replay", -1, 51, 51);
    m.scenario = "replay-early";
    runs.push_back(score_run(m, diag("data_replay", 40)));
  }
  // zero_grad_rank, correct.
  runs.push_back(score_run(faulty("zero_grad_rank", 1, 100, 100, 10.0), diag("zero_grad_rank", 103, 10.25, 1)));
  // four healthy runs, one false alarm.
  for (int i = 0; i < 3; ++i) runs.push_back(score_run(healthy_manifest("clean" + std::to_string(i)), Diagnosis{}));
  runs.push_back(score_run(healthy_manifest("clean-fa"), diag("lr_zero", 30)));
  return score_suite(runs);
}

TEST(Score, SuiteAggregates) {
  SuiteScore s = example_suite();
  ASSERT_EQ(s.runs.size(), 12u);
  EXPECT_EQ(s.correct, 9);  // 5 lr_zero + 1 zero_grad_rank + 3 clean
  EXPECT_DOUBLE_EQ(s.accuracy, 9.0 / 12.0);
  EXPECT_EQ(s.healthy_runs, 4);
  EXPECT_EQ(s.false_alarms, 2);  // replay-early and clean-fa
  EXPECT_DOUBLE_EQ(s.false_alarms_per_healthy_run, 0.25);
  EXPECT_EQ(s.expect_failures, 3);  // lr-missed, replay-early, clean-fa

  EXPECT_EQ(s.confusion["lr_zero"]["lr_zero"], 5);
  EXPECT_EQ(s.confusion["lr_zero"]["data_replay"], 1);
  EXPECT_EQ(s.confusion["data_replay"]["data_replay"], 1);
  EXPECT_EQ(s.confusion["zero_grad_rank"]["zero_grad_rank"], 1);
  EXPECT_EQ(s.confusion["healthy"]["healthy"], 3);
  EXPECT_EQ(s.confusion["healthy"]["lr_zero"], 1);
  int total = 0;
  for (auto& [t, row] : s.confusion)
    for (auto& [d, n] : row) total += n;
  EXPECT_EQ(total, 12);

  // Only correct runs: the misdiagnosed and the early runs do not count.
  const CauseLatency& lr = s.latency.at("lr_zero");
  EXPECT_EQ(lr.n, 5);
  EXPECT_DOUBLE_EQ(lr.median_steps, 3);
  EXPECT_DOUBLE_EQ(lr.p95_steps, 10);  // nearest rank: ceil(0.95 * 5) = 5th of 5
  EXPECT_DOUBLE_EQ(lr.median_s, 1.5);
  EXPECT_DOUBLE_EQ(lr.p95_s, 5.0);
  const CauseLatency& zg = s.latency.at("zero_grad_rank");
  EXPECT_EQ(zg.n, 1);
  EXPECT_DOUBLE_EQ(zg.median_steps, 3);
  EXPECT_DOUBLE_EQ(zg.median_s, 0.25);
  const CauseLatency& dr = s.latency.at("data_replay");  // a true cause with no correct detection
  EXPECT_EQ(dr.n, 0);
  EXPECT_TRUE(std::isnan(dr.median_steps));
  EXPECT_EQ(s.latency.count("healthy"), 0u);
}

TEST(Score, P95NearestRankOnAKnownList) {
  // Latencies 1..20: nearest rank ceil(0.95 * 20) = 19 -> 19 (linear interpolation would give 19.05).
  // Median of an even count: mean of the middle two, (10 + 11) / 2.
  std::vector<RunScore> runs;
  for (int lat = 20; lat >= 1; --lat)
    runs.push_back(score_run(faulty("lr_zero", -1, 1, 100, NAN, 100), diag("lr_zero", 100 + lat)));
  SuiteScore s = score_suite(runs);
  const CauseLatency& l = s.latency.at("lr_zero");
  EXPECT_EQ(l.n, 20);
  EXPECT_DOUBLE_EQ(l.median_steps, 10.5);
  EXPECT_DOUBLE_EQ(l.p95_steps, 19);
  EXPECT_TRUE(std::isnan(l.median_s));  // no onset_t: no seconds
  // 21 values 0..20: ceil(19.95) = 20th -> 19.
  runs.push_back(score_run(faulty("lr_zero", -1, 1, 100, NAN, 100), diag("lr_zero", 100)));
  EXPECT_DOUBLE_EQ(score_suite(runs).latency.at("lr_zero").p95_steps, 19);
  // 2 values: ceil(1.9) = 2nd -> the larger.
  std::vector<RunScore> two = {runs[0], runs[19]};  // 20 and 1
  EXPECT_DOUBLE_EQ(score_suite(two).latency.at("lr_zero").p95_steps, 20);
}

TEST(Score, EmptySuite) {
  SuiteScore s = score_suite({});
  EXPECT_EQ(s.correct, 0);
  EXPECT_DOUBLE_EQ(s.accuracy, 0);
  EXPECT_DOUBLE_EQ(s.false_alarms_per_healthy_run, 0);
  EXPECT_NE(render_table(s).find("accuracy: 0/0 (0.0%)"), std::string::npos);
  EXPECT_NE(to_junit(s).find("tests=\"0\" failures=\"0\""), std::string::npos);
}

TEST(Score, TableShowsRowsAggregatesAndConfusion) {
  std::string t = render_table(example_suite());
  EXPECT_NE(t.find("accuracy: 9/12 (75.0%)"), std::string::npos) << t;
  EXPECT_NE(t.find("false alarms per healthy run: 0.25"), std::string::npos) << t;
  EXPECT_NE(t.find("FALSE ALARM"), std::string::npos);
  EXPECT_NE(t.find("MISS "), std::string::npos);
  EXPECT_NE(t.find("zero_grad_rank rank 1"), std::string::npos);
  EXPECT_NE(t.find("replay-early: false alarm: data_replay at step 40 before active_from 51"), std::string::npos);
  EXPECT_NE(t.find("confusion (rows: truth, columns: diagnosis)"), std::string::npos);
  EXPECT_NE(t.find("p95 nearest-rank"), std::string::npos);
  // Fixed width: every run row is as wide as the header up to the expect column.
  size_t header_end = t.find("expect\n");
  ASSERT_NE(header_end, std::string::npos);
  size_t row = t.find("\nlr0 ");
  ASSERT_NE(row, std::string::npos);
  size_t col = t.find("met", row) - row - 1;
  EXPECT_EQ(col, header_end);
  // The confusion row of lr_zero: 5 on the diagonal, 1 as data_replay. Causes present, checklist order:
  // [1] lr_zero [2] data_replay [3] zero_grad_rank [4] healthy.
  size_t lr_row = t.find("[1] lr_zero");
  ASSERT_NE(lr_row, std::string::npos);
  std::string line = t.substr(lr_row, t.find('\n', lr_row) - lr_row);
  EXPECT_EQ(line, "[1] lr_zero          5   1   .   .");
}

TEST(Score, JsonHasRunsSummaryConfusionAndLatency) {
  auto j = nlohmann::json::parse(to_json(example_suite()));
  EXPECT_EQ(j["summary"]["runs"], 12);
  EXPECT_EQ(j["summary"]["correct"], 9);
  EXPECT_DOUBLE_EQ(j["summary"]["accuracy"].get<double>(), 0.75);
  EXPECT_EQ(j["summary"]["false_alarms"], 2);
  EXPECT_EQ(j["confusion"]["lr_zero"]["data_replay"], 1);
  EXPECT_EQ(j["latency"]["lr_zero"]["p95_steps"], 10.0);
  EXPECT_TRUE(j["latency"]["data_replay"]["median_steps"].is_null());
  EXPECT_EQ(j["runs"][0]["scenario"], "lr0");
  EXPECT_EQ(j["runs"][0]["latency_steps"], 3);
  EXPECT_EQ(j["runs"][6]["result"], "FALSE ALARM");
  EXPECT_TRUE(j["runs"][8]["latency_steps"].is_null());  // clean run
}

TEST(Score, JunitHasFailuresAndEscapes) {
  std::vector<RunScore> runs;
  Manifest m = faulty("lr_zero", -1, 52, 400);
  m.scenario = "lr<&\"x'>";
  m.status = "failed";
  m.error = "boom <rank 1> & \"quoted\"\nsecond line";
  m.wall_s = 3.25;
  runs.push_back(score_run(m, diag("lr_zero", 401)));
  runs.push_back(score_run(healthy_manifest("clean"), Diagnosis{}));
  std::string x = to_junit(score_suite(runs));
  EXPECT_EQ(x.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 0), 0u);
  // a failed run is the harness's error, not the detectors' failure
  EXPECT_NE(x.find("<testsuites name=\"flatline\" tests=\"2\" failures=\"0\" errors=\"1\""), std::string::npos) << x;
  EXPECT_NE(x.find("<testsuite name=\"flatline.score\" tests=\"2\" failures=\"0\" errors=\"1\""), std::string::npos);
  EXPECT_NE(x.find("<testcase classname=\"flatline.lr_zero\" name=\"lr&lt;&amp;&quot;x&apos;&gt;\" time=\"3.250\">"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<error message=\"harness error: run failed (expected lr_zero within 5 steps): boom &lt;rank 1&gt; "
                   "&amp; &quot;quoted&quot;&#10;second line\" type=\"harness\">"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<testcase classname=\"flatline.healthy\" name=\"clean\" time=\"0.000\"/>"), std::string::npos);
  EXPECT_EQ(x.find("lr<"), std::string::npos);  // no raw specials leak
  EXPECT_EQ(x.find("\"quoted\""), std::string::npos);
  // Balanced: one error element, opened and closed.
  EXPECT_NE(x.find("</error>\n    </testcase>"), std::string::npos);
  EXPECT_NE(x.find("</testsuite>\n</testsuites>\n"), std::string::npos);
}

}  // namespace
}  // namespace flatline
