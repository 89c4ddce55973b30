// Format variants seen in real logs (tests/data/logs/variants/, make_variants.py: Megatron-LM and
// DeepSpeed lines formatted as their logging code formats them, HF and Lightning schema and layout
// differences): each is read by the right reader, its fields land where they belong, and the run is
// diagnosed as its story says.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

std::string variants(const std::string& rel) { return logs("variants/" + rel); }

const Record& step_record(const LogData& log, int64_t step) {
  for (const auto& r : log.records)
    if (r.kind == RecordKind::step && r.step == step) return r;
  static Record none;
  ADD_FAILURE() << "no step record " << step;
  return none;
}
int count(const LogData& log, RecordKind k) {
  int n = 0;
  for (const auto& r : log.records) n += r.kind == k;
  return n;
}

struct Case {
  std::string path, format, cause;
  int64_t onset, detected;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.path; }
class Variant : public ::testing::TestWithParam<Case> {};

TEST_P(Variant, ReadAndDiagnosed) {
  const Case& c = GetParam();
  LogData log = read_log(variants(c.path));
  EXPECT_EQ(log.format, c.format);
  Diagnosis d = replay(log);
  EXPECT_EQ(d.cause, c.cause) << to_text(d);
  EXPECT_EQ(d.onset_step, c.onset) << to_text(d);
  EXPECT_EQ(d.detected_step, c.detected) << to_text(d);
}

const Case kCases[] = {
    // Megatron: 2021 (no timestamp, 3-decimal lr, timer lines) with the schedule at 0 from 400 of 600.
    {"megatron/2021-format.log", "megatron", "lr_zero", 400, 410},
    // core_r0.8: the fp16 search from 2^32 skips whole intervals; bf16 prints loss scale 1.0 throughout;
    // both cosine schedules end at 0 on train_iters, which is the plan.
    {"megatron/core_r0.8-fp16-search.log", "megatron", "healthy", -1, -1},
    {"megatron/core_r0.8-bf16.log", "megatron", "healthy", -1, -1},
    {"megatron/core_r0.8-nccl-watchdog.log", "megatron", "run_not_alive", 301, 301},
    {"megatron/stopped-then-killed.log", "megatron", "run_not_alive", 301, 301},
    // Megatron-DeepSpeed pipeline mode says 0 skipped; DeepSpeed's counter and overflow lines say the
    // scale sits at its floor of 1 and overflows on 3 steps of 4.
    {"megatron-deepspeed/pipeline-fp16-floor.log", "megatron", "loss_scale_collapse", 405, 407},
    {"deepspeed/variants-healthy.log", "deepspeed", "healthy", -1, -1},
    {"deepspeed/scale-floor-every-step.log", "deepspeed", "loss_scale_collapse", 101, 110},
    {"deepspeed/min-scale-zero.log", "deepspeed", "loss_scale_collapse", 61, 66},
    // The last overflows come after the last step line: placed right after it (91, 92).
    {"deepspeed/min-scale-error.log", "deepspeed", "loss_scale_collapse", 91, 92},
    {"console/elastic-summary.log", "console", "run_not_alive", 81, 81},
    {"hf/predict-trl-crlf/trainer_state.json", "hf", "healthy", -1, -1},
    {"hf/old-schema/trainer_state.json", "hf", "lr_zero", 300, 310},
    {"lightning/crlf-step-first-no-lr/metrics.csv", "lightning", "healthy", -1, -1},
    {"lightning/lf-metrics-first/metrics.csv", "lightning", "lr_zero", 250, 255},
};
INSTANTIATE_TEST_SUITE_P(Formats, Variant, ::testing::ValuesIn(kCases));

TEST(Variants, Megatron2021FieldsAndClock) {
  LogData log = read_log(variants("megatron/2021-format.log"));
  ASSERT_EQ(count(log, RecordKind::step), 60);
  const Record& r = step_record(log, 100);
  EXPECT_DOUBLE_EQ(*r.lr, 2.571e-04);  // "{:.3E}"
  EXPECT_DOUBLE_EQ(*r.step_ms, 1000.0);
  // No timestamp on the lines: placed at "[before the start of training step] datetime:" plus the
  // elapsed time per iteration x 10 per line; t = 0 at the first line.
  EXPECT_DOUBLE_EQ(step_record(log, 10).t, 0.0);
  EXPECT_DOUBLE_EQ(r.t, 90.0);
  EXPECT_EQ(log.facts.planned_steps, 600);
}

TEST(Variants, MegatronSkippedIntervalsHaveNoLossAndBf16IsNotFp16) {
  LogData log = read_log(variants("megatron/core_r0.8-fp16-search.log"));
  const Record& first = step_record(log, 5);  // iterations 1..5: all skipped in the search from 2^32
  EXPECT_TRUE(*first.skipped);
  EXPECT_FALSE(first.loss.has_value());
  EXPECT_FALSE(first.grad_norm.has_value());
  EXPECT_DOUBLE_EQ(*step_record(log, 20).loss_scale, 32768.0);  // 17 halvings from 2^32
  EXPECT_DOUBLE_EQ(*step_record(log, 100).lr, 2.909539e-04);    // "{:.6E}"
  EXPECT_EQ(count(log, RecordKind::eval), 5);                     // validation loss at iteration 100, ...
  Diagnosis bf16 = diagnose(variants("megatron/core_r0.8-bf16.log"));
  EXPECT_EQ(check_of(bf16, "loss_scale_collapse").detail, "not fp16 (loss scale 1, no overflow)");
}

TEST(Variants, WatchdogAndGapAreRunNotAliveEvidence) {
  Diagnosis d = diagnose(variants("megatron/core_r0.8-nccl-watchdog.log"));
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_NE(d.evidence[0].find("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE"),
            std::string::npos)
      << d.evidence[0];
  d = diagnose(variants("megatron/stopped-then-killed.log"));
  // stopped for 30 min, then killed by the launcher: a hang (the kill is its end, not a crash)
  EXPECT_EQ(d.evidence[0].substr(0, 36), "no step for 1812.00 s after step 300") << d.evidence[0];
  EXPECT_EQ(d.evidence[0].find("crash"), std::string::npos) << d.evidence[0];
}

TEST(Variants, MegatronDeepSpeedTakesTheCounterAndTheLossFromDeepSpeed) {
  LogData log = read_log(variants("megatron-deepspeed/pipeline-fp16-floor.log"));
  int skipped = 0, with_loss = 0;
  for (const auto& r : log.records)
    if (r.kind == RecordKind::step) skipped += r.skipped.value_or(false), with_loss += r.loss.has_value();
  EXPECT_EQ(skipped, 1590);  // DeepSpeed's skipped= at step 2500, not Megatron's 0
  // One record per skipped step and one per interval of 10 with an applied step (234 of 250).
  EXPECT_EQ(count(log, RecordKind::step), 1590 + 234);
  EXPECT_GT(with_loss, 200);  // "steps: N loss: X" every 10 steps, not only Megatron's 6 lines
  const Record& r400 = step_record(log, 400);
  EXPECT_FALSE(r400.grad_norm.has_value());  // Megatron-DeepSpeed's placeholder 0.000 dropped
  EXPECT_EQ(*r400.samples_seen, 102400);     // Megatron's fields merged into DeepSpeed's record
  EXPECT_EQ(log.facts.planned_steps, 2500);
}

TEST(Variants, DeepSpeedSpellingsPdshAndUserLoss) {
  LogData log = read_log(variants("deepspeed/variants-healthy.log"));
  EXPECT_TRUE(log.warnings.empty()) << log.warnings.front();
  // [deepscale] OVERFLOW!, the fused optimizer's three lines (one overflow), the hysteresis form.
  const Record& s1 = step_record(log, 1);
  EXPECT_TRUE(*s1.skipped);
  EXPECT_DOUBLE_EQ(*s1.loss_scale, 65536);
  EXPECT_DOUBLE_EQ(*step_record(log, 2).loss_scale, 32768);
  EXPECT_TRUE(*step_record(log, 3).skipped);
  EXPECT_DOUBLE_EQ(*step_record(log, 3).loss_scale, 16384);
  const Record& r10 = step_record(log, 10);  // rank:0 step=10, skipped=3 (the 2020 line), behind pdsh
  EXPECT_FALSE(*r10.skipped);
  EXPECT_DOUBLE_EQ(*r10.loss_scale, 16384);  // the hysteresis overflow kept the scale
  EXPECT_DOUBLE_EQ(*r10.lr, 5.4e-05);        // the first of two parameter groups
  ASSERT_TRUE(r10.loss.has_value());         // from HF's printed dict after the step line
  EXPECT_DOUBLE_EQ(*r10.loss, 4.7908);
  EXPECT_EQ(check_of(replay(log), "loss_scale_collapse").detail,
            "fp16: loss scale 16384 at step 300; 3 skipped step(s), initial scale search 3 step(s)");
}

TEST(Variants, MinimumScaleErrorAndTutorialLoss) {
  LogData log = read_log(variants("deepspeed/min-scale-error.log"));
  const Record& e = log.records.back();
  EXPECT_EQ(e.kind, RecordKind::event);
  EXPECT_EQ(e.name, "error");
  EXPECT_EQ(e.detail, "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.");
  EXPECT_DOUBLE_EQ(*step_record(log, 10).loss, 3.814);  // "[1,  1100] loss: 3.814"
}

TEST(Variants, HfPredictTrlCrlfNanAndZeroLrAtBothEnds) {
  LogData log = read_log(variants("hf/predict-trl-crlf/trainer_state.json"));
  EXPECT_TRUE(log.warnings.empty()) << log.warnings.front();  // the predict_* entry is a summary
  EXPECT_EQ(count(log, RecordKind::step), 41);
  EXPECT_DOUBLE_EQ(*step_record(log, 1).lr, 0.0);
  EXPECT_DOUBLE_EQ(*step_record(log, 400).lr, 0.0);
  EXPECT_TRUE(std::isnan(*step_record(log, 200).grad_norm));
  EXPECT_EQ(*step_record(log, 200).samples_seen, 3200);  // epoch 1.0 x 200 steps per epoch x 16
  EXPECT_EQ(log.facts.planned_steps, 400);
  EXPECT_EQ(check_of(replay(log), "lr_zero").state, CheckState::pass);
}

TEST(Variants, LightningWithoutLrAndInEitherOrder) {
  LogData log = read_log(variants("lightning/crlf-step-first-no-lr/metrics.csv"));
  EXPECT_TRUE(log.warnings.empty()) << log.warnings.front();
  EXPECT_EQ(count(log, RecordKind::step), 75);
  EXPECT_EQ(count(log, RecordKind::eval), 3);
  EXPECT_FALSE(step_record(log, 100).lr.has_value());
  Diagnosis d = replay(log);
  EXPECT_EQ(check_of(d, "lr_zero").state, CheckState::cannot_run);
  EXPECT_EQ(check_of(d, "lr_zero").detail, "missing lr: log the learning rate per step");
  LogData m = read_log(variants("lightning/lf-metrics-first/metrics.csv"));
  EXPECT_DOUBLE_EQ(*step_record(m, 100).lr, 0.1);  // lr-SGD's row and train_loss's row: one record
  EXPECT_TRUE(step_record(m, 100).loss.has_value());
}

TEST(Variants, SparseFp16LogNamesTheCollapseFromDeepSpeedsSkippedCounter) {
  // 5 progress lines in 2500 steps: the counter rose 9 -> 390 over steps 1001..1500 (381 of 500).
  LogData log = read_log(variants("megatron-deepspeed/sparse-fp16-floor.log"));
  EXPECT_EQ(*step_record(log, 1500).opt_step, 1500 - 390);  // step - skipped, on the step's one record
  Diagnosis d = replay(log);
  EXPECT_EQ(d.cause, "loss_scale_collapse");
  EXPECT_EQ(d.onset_step, 1500 - 381 + 1);  // the skipped steps placed last: where the run ends up
  EXPECT_EQ(d.detected_step, 1500);
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_EQ(d.evidence[0].substr(0, 44), "381 of the 500 steps 1001..1500 skipped (76%") << d.evidence[0];
  // the healthy twin: 10 skipped in 2500 steps (8 of them the initial search)
  Diagnosis h = diagnose(variants("megatron-deepspeed/sparse-fp16-healthy.log"));
  EXPECT_EQ(h.cause, "healthy") << (h.evidence.empty() ? "" : h.evidence[0]);
  EXPECT_EQ(check_of(h, "loss_scale_collapse").state, CheckState::pass);
}

TEST(Variants, OverflowLinesEveryRankPrintsAreOneOverflowEach) {
  // 4 ranks print each overflow's fused-optimizer lines: 14 overflows, as the skipped= counter says.
  LogData log = read_log(variants("deepspeed/rank-copies-healthy.log"));
  int skipped = 0;
  for (const auto& r : log.records) skipped += r.kind == RecordKind::step && r.skipped.value_or(false);
  EXPECT_EQ(skipped, 14);
  EXPECT_DOUBLE_EQ(*step_record(log, 9).loss_scale, 256.0);  // the search's 9th halving attempted 256
  Diagnosis d = replay(log);
  EXPECT_EQ(d.cause, "healthy") << (d.evidence.empty() ? "" : d.evidence[0]);
}

TEST(Variants, ClockOnlyHangsAreRunNotAlive) {
  // the step line has no clock; the monitor's lines span six hours after it: at least that long stuck
  Diagnosis d = diagnose(variants("megatron/monitor-after-hang.log"));
  EXPECT_EQ(d.cause, "run_not_alive");
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_NE(d.evidence[0].find("after step 4000"), std::string::npos) << d.evidence[0];
  EXPECT_NE(d.evidence[0].find("21600"), std::string::npos) << d.evidence[0];
  // Slurm cancels it at the time limit four hours after the last iteration: a hang, then the end
  d = diagnose(variants("megatron/slurm-time-limit-after-hang.log"));
  EXPECT_EQ(d.cause, "run_not_alive");
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_EQ(d.evidence[0].substr(0, 37), "no step for 14400.00 s after step 300") << d.evidence[0];
  EXPECT_NE(d.evidence[0].find("DUE TO TIME LIMIT"), std::string::npos) << d.evidence[0];
}

}  // namespace
}  // namespace flatline::testing
