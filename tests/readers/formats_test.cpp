// Every format reads its fixture (tests/data/logs, written by make_fixtures.py) into the diagnosis the
// story of that run calls for: the cause with its exact onset and detected step where the format
// carries the signal, and silence on the healthy runs, which hold the look-alikes (warmup from lr 0,
// the fp16 initial loss-scale search, a cosine tail down to 0.2% of peak). What a format cannot carry
// shows up as "cannot run" with what to log.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

struct Case {
  std::string path;
  std::string format;
  std::string cause;
  int64_t onset, detected;
  int64_t records;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.path; }

class Fixture : public ::testing::TestWithParam<Case> {};

TEST_P(Fixture, AutoDetectedAndDiagnosed) {
  const Case& c = GetParam();
  LogData log = read_log(logs(c.path));
  EXPECT_EQ(log.format, c.format);
  EXPECT_EQ(static_cast<int64_t>(log.records.size()), c.records);
  Diagnosis d = replay(log);
  EXPECT_EQ(d.cause, c.cause) << to_text(d);
  EXPECT_EQ(d.onset_step, c.onset);
  EXPECT_EQ(d.detected_step, c.detected);
  // Forcing the format gives the same answer.
  Diagnosis forced = diagnose(logs(c.path), c.format);
  EXPECT_EQ(forced.cause, d.cause);
  EXPECT_EQ(forced.detected_step, d.detected_step);
}

const Case kCases[] = {
    {"flatline/healthy", "flatline", "healthy", -1, -1, 1800},
    {"flatline/lr_zero", "flatline", "lr_zero", 393, 394, 1800},
    {"flatline/zero_grad_rank", "flatline", "zero_grad_rank", 300, 301, 1800},
    {"hf/healthy", "hf", "healthy", -1, -1, 64},
    {"hf/lr_zero/trainer_state.json", "hf", "lr_zero", 400, 410, 64},
    {"megatron/healthy.log", "megatron", "healthy", -1, -1, 60},
    {"megatron/warmup_every_iteration.log", "megatron", "healthy", -1, -1, 120},
    {"megatron/lr_zero.log", "megatron", "lr_zero", 400, 410, 60},
    {"megatron/collapse.log", "megatron", "loss_scale_collapse", 300, 320, 60},
    {"deepspeed/healthy.log", "deepspeed", "healthy", -1, -1, 600},
    {"deepspeed/lr_zero.log", "deepspeed", "lr_zero", 400, 410, 63},
    {"deepspeed/collapse.log", "deepspeed", "loss_scale_collapse", 300, 309, 48},
    {"lightning/healthy", "lightning", "healthy", -1, -1, 64},
    {"lightning/lr_zero/metrics.csv", "lightning", "lr_zero", 400, 410, 64},
    {"wandb/healthy.csv", "wandb", "healthy", -1, -1, 61},
    {"wandb/lr_zero.csv", "wandb", "lr_zero", 400, 410, 61},
    {"tensorboard/healthy", "tensorboard", "healthy", -1, -1, 603},
    {"tensorboard/lr_zero", "tensorboard", "lr_zero", 393, 394, 603},
    // TensorBoard logs the scale but not the skipped steps: the collapse shows once the scale is
    // below 1 and the gradients underflow (step 313), not at its first overflow (step 300).
    {"tensorboard/collapse", "tensorboard", "loss_scale_collapse", 313, 314, 603},
};
INSTANTIATE_TEST_SUITE_P(Readers, Fixture, ::testing::ValuesIn(kCases));

TEST(Formats, MissingSignalsAreCannotRunWithWhatToLog) {
  Diagnosis d = diagnose(logs("hf/healthy"));
  EXPECT_EQ(check_of(d, "run_not_alive").state, CheckState::cannot_run);
  EXPECT_EQ(check_of(d, "run_not_alive").detail,
            "missing heartbeats and t: log a wall-clock heartbeat from a watchdog thread");
  EXPECT_EQ(check_of(d, "data_replay").detail, "missing batch_hash: log a hash of each batch's sample ids");
  EXPECT_EQ(check_of(d, "zero_grad_rank").state, CheckState::cannot_run);
  EXPECT_EQ(check_of(d, "zero_grad_rank").detail,
            "missing local_grad_norm: log each rank's grad norm before the all-reduce");
  // trainer_state.json logs no scaler state: whether it is fp16 is not known (not a pass).
  EXPECT_EQ(check_of(d, "loss_scale_collapse").state, CheckState::cannot_run);
  EXPECT_EQ(check_of(d, "loss_scale_collapse").detail,
            "missing loss_scale: log the loss scale (GradScaler.get_scale()) and skipped/overflow steps");
  const std::string text = to_text(d);
  EXPECT_NE(text.find("cannot run  missing batch_hash"), std::string::npos) << text;
}

TEST(Formats, ScaleSearchIsSeenAndHealthy) {
  Diagnosis d = diagnose(logs("deepspeed/healthy.log"));
  EXPECT_EQ(check_of(d, "loss_scale_collapse").detail,
            "fp16: loss scale 8192 at step 600; 3 skipped step(s), initial scale search 3 step(s)");
  d = diagnose(logs("megatron/warmup_every_iteration.log"));
  EXPECT_EQ(check_of(d, "loss_scale_collapse").detail,
            "fp16: loss scale 65536 at step 120; 16 skipped step(s), initial scale search 16 step(s)");
}

TEST(Formats, MegatronFieldsMapped) {
  LogData log = read_log(logs("megatron/healthy.log"));
  ASSERT_EQ(log.records.size(), 60u);
  const Record& r = log.records[9];  // iteration 100
  EXPECT_EQ(r.step, 100);
  EXPECT_DOUBLE_EQ(*r.lr, 2.939361e-04);
  EXPECT_EQ(*r.samples_seen, 25600);
  EXPECT_DOUBLE_EQ(*r.step_ms, 812.3);
  EXPECT_DOUBLE_EQ(*r.loss_scale, 65536.0);
  EXPECT_FALSE(*r.skipped);
  EXPECT_DOUBLE_EQ(r.t, 90.0);  // 12:01:40 - 12:00:10
  EXPECT_TRUE(r.loss && r.grad_norm);
  const Record& first = log.records[0];  // iterations 1..10: all skipped (the search from 2^32)
  EXPECT_TRUE(*first.skipped);
  EXPECT_FALSE(first.loss.has_value());
  EXPECT_FALSE(first.grad_norm.has_value());
}

TEST(Formats, DeepSpeedRebuildsSkippedSteps) {
  LogData log = read_log(logs("deepspeed/collapse.log"));
  // The initial search (steps 1..3, placed first), 29 applied intervals (10..290), the applied part
  // of (290, 300] at 299, steps 300..312 skipped, the min-scale error at 313 (+ its event).
  ASSERT_EQ(log.records.size(), 48u);
  EXPECT_TRUE(*log.records[0].skipped);
  EXPECT_EQ(log.records[0].step, 1);
  EXPECT_DOUBLE_EQ(*log.records[0].loss_scale, 65536);
  EXPECT_EQ(log.records[3].step, 10);
  EXPECT_DOUBLE_EQ(*log.records[3].loss_scale, 8192);
  const Record& a = log.records[32];
  EXPECT_EQ(a.step, 299);
  EXPECT_FALSE(*a.skipped);
  const Record& s = log.records[33];
  EXPECT_EQ(s.step, 300);
  EXPECT_TRUE(*s.skipped && *s.overflow);
  EXPECT_DOUBLE_EQ(*s.loss_scale, 8192);
  const Record& e = log.records.back();
  EXPECT_EQ(e.kind, RecordKind::event);
  EXPECT_EQ(e.name, "error");
  EXPECT_EQ(e.step, 313);
  EXPECT_EQ(e.detail, "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.");
}

TEST(Formats, HfPythonNanAndInfinityTokens) {
  LogData log = read_log(logs("hf/healthy/trainer_state.json"));
  ASSERT_GE(log.records.size(), 6u);
  EXPECT_EQ(log.records[5].step, 50);
  EXPECT_TRUE(std::isinf(*log.records[5].grad_norm));
  EXPECT_TRUE(std::isnan(*log.records[0].grad_norm));  // step 1 skipped in the search: NaN
  int evals = 0;
  for (const auto& r : log.records) evals += r.kind == RecordKind::eval;
  EXPECT_EQ(evals, 3);
  EXPECT_TRUE(log.warnings.empty());
}

TEST(Formats, TensorBoardTagsAndTensorScalars) {
  LogData log = read_log(logs("tensorboard/healthy"));
  const Record& r = log.records[99];
  EXPECT_EQ(r.step, 100);
  EXPECT_FLOAT_EQ(static_cast<float>(*r.lr), 2.9393609e-04f);  // a DT_FLOAT tensor, not simple_value
  EXPECT_DOUBLE_EQ(*r.loss_scale, 8192);
  EXPECT_DOUBLE_EQ(r.t, 50.0);
}

}  // namespace
}  // namespace flatline::testing
