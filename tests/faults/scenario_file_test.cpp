// Scenario loading: the DESIGN.md example, defaults, strict errors with source:line:col, and to_yaml
// re-loading to the same scenario.
#include "faults/scenario_file.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace flatline {
namespace {

std::string test_data(const std::string& rel) {
  const char* env = std::getenv("FLATLINE_TEST_DATA");
  return (env && *env ? std::string(env) : std::string(FLATLINE_SOURCE_DIR) + "/tests/data") + "/" + rel;
}

// The message of the ScenarioError that loading `yaml` throws ("" when it loads).
std::string load_error(const std::string& yaml) {
  try {
    load_scenario_text(yaml, "t.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(Scenario, SgdDefaultsToTorchsWeightDecayOfZero) {
  auto sgd = load_scenario_text("name: x\noptimizer: {kind: sgd, lr: 0.1}\nexpect: {cause: healthy}\n", "t.yaml");
  EXPECT_EQ(sgd.optimizer.weight_decay, 0.0);
  auto sgd_wd = load_scenario_text("name: x\noptimizer: {kind: sgd, weight_decay: 0.01}\nexpect: {cause: healthy}\n", "t.yaml");
  EXPECT_EQ(sgd_wd.optimizer.weight_decay, 0.01);
  auto adamw = load_scenario_text("name: x\noptimizer: {kind: adamw}\nexpect: {cause: healthy}\n", "t.yaml");
  EXPECT_EQ(adamw.optimizer.weight_decay, 0.1);
}

TEST(Scenario, DesignExampleLoadsWithItsValues) {
  const std::string path = test_data("scenarios/lr_cosine_400_of_1000.yaml");
  Scenario s = load_scenario_file(path);
  EXPECT_EQ(s.name, "lr-cosine-sized-for-400-of-1000");
  EXPECT_EQ(s.source, path);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.model.kind, "gpt");
  EXPECT_EQ(s.model.n_layer, 2);
  EXPECT_EQ(s.model.n_head, 4);
  EXPECT_EQ(s.model.n_embd, 64);
  EXPECT_EQ(s.model.block_size, 64);
  EXPECT_EQ(s.data.kind, "text");
  EXPECT_EQ(s.data.path, "");
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.steps, 1000);
  EXPECT_EQ(s.batch_size, 16);
  EXPECT_EQ(s.optimizer.kind, "adamw");
  EXPECT_EQ(s.optimizer.lr, 3.0e-3);
  EXPECT_EQ(s.optimizer.beta1, 0.9);
  EXPECT_EQ(s.optimizer.beta2, 0.95);
  EXPECT_EQ(s.optimizer.weight_decay, 0.1);
  EXPECT_EQ(s.optimizer.grad_clip, 1.0);
  EXPECT_EQ(s.schedule.kind, "cosine");
  EXPECT_EQ(s.schedule.warmup, 50);
  EXPECT_EQ(s.schedule.total, 1000);
  EXPECT_EQ(s.schedule.min_lr, 3.0e-4);
  EXPECT_EQ(s.precision, "fp32");
  EXPECT_EQ(s.checkpoint_every, 200);
  ASSERT_EQ(s.faults.size(), 1u);
  const FaultSpec& f = s.faults[0];
  EXPECT_EQ(f.kind, "lr_zero");
  EXPECT_EQ(f.mode, "schedule_total_too_short");
  EXPECT_EQ(f.at, 400);
  EXPECT_EQ(f.range_start, -1);
  EXPECT_EQ(f.lifetime_steps, -1);
  EXPECT_EQ(f.target_rank, -1);
  EXPECT_TRUE(f.params.empty());
  EXPECT_EQ(f.line, 13);  // the '- kind: lr_zero' line
  EXPECT_EQ(s.expect.cause, "lr_zero");
  EXPECT_EQ(s.expect.rank, -1);
  EXPECT_EQ(s.expect.within_steps, 5);
}

TEST(Scenario, Defaults) {
  Scenario s = load_scenario_text("name: minimal\nexpect: {cause: healthy}\n", "<embedded:main/minimal.yaml>");
  EXPECT_EQ(s.name, "minimal");
  EXPECT_EQ(s.source, "<embedded:main/minimal.yaml>");
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.model.kind, "gpt");
  EXPECT_EQ(s.model.n_layer, 2);
  EXPECT_EQ(s.model.n_head, 4);
  EXPECT_EQ(s.model.n_embd, 64);
  EXPECT_EQ(s.model.block_size, 64);
  EXPECT_TRUE(s.model.tied_head);
  EXPECT_EQ(s.data.kind, "text");
  EXPECT_EQ(s.data.eval_fraction, 0.05);
  EXPECT_EQ(s.world_size, 1);
  EXPECT_EQ(s.steps, 100);
  EXPECT_EQ(s.batch_size, 16);
  EXPECT_EQ(s.grad_accum, 1);
  EXPECT_EQ(s.optimizer.kind, "adamw");
  EXPECT_EQ(s.optimizer.lr, 3.0e-3);
  EXPECT_EQ(s.optimizer.beta1, 0.9);
  EXPECT_EQ(s.optimizer.beta2, 0.95);
  EXPECT_EQ(s.optimizer.eps, 1e-8);
  EXPECT_EQ(s.optimizer.weight_decay, 0.1);
  EXPECT_EQ(s.optimizer.grad_clip, 1.0);
  EXPECT_EQ(s.schedule.kind, "cosine");
  EXPECT_EQ(s.schedule.warmup, 0);
  EXPECT_EQ(s.schedule.total, 100);  // 0 resolves to `steps`
  EXPECT_EQ(s.schedule.min_lr, 0.0);
  EXPECT_EQ(s.precision, "fp32");
  EXPECT_EQ(s.checkpoint_every, 0);
  EXPECT_EQ(s.restart_at, -1);
  EXPECT_EQ(s.eval_every, 0);
  EXPECT_EQ(s.eval_batches, 4);
  EXPECT_EQ(s.heartbeat_s, 0.5);
  EXPECT_EQ(s.collective_timeout_s, 30);
  EXPECT_EQ(s.log_every, 1);
  EXPECT_FALSE(s.fleet_only);
  EXPECT_TRUE(s.faults.empty());
  EXPECT_EQ(s.expect.cause, "healthy");
  EXPECT_EQ(s.expect.within_steps, 5);
}

TEST(Scenario, ScheduleTotalDefaultsToStepsAndFaultDefaults) {
  Scenario s = load_scenario_text(R"(name: x
steps: 300
schedule: {kind: linear, warmup: 10}
faults:
  - {kind: data_replay, at: 100, params: {mode: cycle_window, window: 8}}
expect: {cause: data_replay}
)",
                                  "t.yaml");
  EXPECT_EQ(s.schedule.total, 300);
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0].params.at("window"), 8.0);
  EXPECT_EQ(s.faults[0].probability, 1.0);
  EXPECT_EQ(s.faults[0].range_every, 1);
  EXPECT_EQ(s.faults[0].line, 5);
}

TEST(Scenario, UnknownTopLevelKey) {
  EXPECT_EQ(load_error("name: x\nsteps: 10\nstepz: 5\nexpect: {cause: healthy}\n").rfind(
                "t.yaml:3:1: unknown key 'stepz' in the scenario (expected one of: ", 0),
            0u);
}

TEST(Scenario, UnknownKeyInModel) {
  std::string e = load_error("name: x\nmodel: {kind: gpt, n_layers: 2}\nexpect: {cause: healthy}\n");
  EXPECT_EQ(e.rfind("t.yaml:2:20: unknown key 'n_layers' in model (expected one of: ", 0), 0u) << e;
}

TEST(Scenario, UnknownKeyInOptimizer) {
  std::string e = load_error("name: x\n\noptimizer:\n  kind: adamw\n  learning_rate: 0.1\nexpect: {cause: healthy}\n");
  EXPECT_EQ(e.rfind("t.yaml:5:3: unknown key 'learning_rate' in optimizer (expected one of: ", 0), 0u) << e;
}

TEST(Scenario, UnknownKeyInFault) {
  std::string e = load_error(R"(name: x
faults:
  - kind: lr_zero
    onset: 400
    params: {mode: schedule_total_too_short}
expect: {cause: lr_zero}
)");
  EXPECT_EQ(e.rfind("t.yaml:4:5: unknown key 'onset' in a fault (expected one of: ", 0), 0u) << e;
}

TEST(Scenario, UnknownFaultParam) {
  std::string e = load_error(R"(name: x
faults:
  - kind: data_replay
    at: 10
    params: {mode: cycle_window, windw: 8}
expect: {cause: data_replay}
)");
  EXPECT_EQ(e.rfind("t.yaml:5:34: unknown fault param 'windw'", 0), 0u) << e;
}

TEST(Scenario, WrongType) {
  EXPECT_EQ(load_error("name: x\nsteps: many\nexpect: {cause: healthy}\n"),
            "t.yaml:2:8: 'steps': expected an integer, got 'many'");
  EXPECT_EQ(load_error("name: x\nworld_size: [1, 2]\nexpect: {cause: healthy}\n").rfind(
                "t.yaml:2:13: 'world_size': expected an integer", 0),
            0u);
  EXPECT_EQ(load_error("name: x\noptimizer: {lr: fast}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:17: 'lr': expected a number, got 'fast'");
  EXPECT_EQ(load_error("name: x\nmodel: gpt\nexpect: {cause: healthy}\n"),
            "t.yaml:2:8: 'model' must be a mapping {...}");
  EXPECT_EQ(load_error("name: x\nfaults:\n  - kind: lr_zero\n    at: soon\n    params: {mode: "
                       "schedule_total_too_short}\nexpect: {cause: lr_zero}\n"),
            "t.yaml:4:9: 'at': expected an integer, got 'soon'");
}

TEST(Scenario, BadFaultKind) {
  EXPECT_EQ(load_error("name: x\nfaults:\n  - {kind: lr_zeroo, at: 5, params: {mode: x}}\nexpect: {cause: healthy}\n"),
            "t.yaml:3:12: unknown fault kind 'lr_zeroo' (expected data_replay | loss_scale_collapse | lr_zero | "
            "run_not_alive | straggler | zero_grad_rank)");  // every registered kind, straggler too
}

// Parameters are declared per mode by each fault kind's registration (faults/fault.h): a name the mode
// does not read, a fraction where an integer is meant, or a value below the minimum is an error where it
// is written.
TEST(Scenario, FaultParamsAreTypedAndDeclaredPerMode) {
  auto fault = [](const std::string& f) {
    return load_error("name: x\nworld_size: 2\nprecision: fp16\nfaults:\n  - " + f + "\nexpect: {cause: healthy}\n");
  };
  EXPECT_EQ(fault("{kind: data_replay, at: 5, params: {mode: cycle_window, window: 2.5}}"),
            "t.yaml:5:69: 'window': expected an integer, got '2.5'");
  EXPECT_EQ(fault("{kind: run_not_alive, at: 5, target: {rank: 1}, params: {mode: hang, every: 3}}"),
            "t.yaml:5:74: unknown fault param 'every' for run_not_alive/hang (expected mode, timeout_s)");
  EXPECT_EQ(fault("{kind: run_not_alive, at: 5, target: {rank: 1}, params: {mode: hang, timeout_s: -1}}"),
            "t.yaml:5:85: 'timeout_s' must be > 0, got -1");
  // a parameter of another mode of the same kind means nothing here
  EXPECT_EQ(fault("{kind: loss_scale_collapse, at: 5, params: {mode: overflow_streak, max_scale: 0.5}}"),
            "t.yaml:5:72: unknown fault param 'max_scale' for loss_scale_collapse/overflow_streak (expected mode, "
            "steps)");
  EXPECT_EQ(fault("{kind: loss_scale_collapse, at: 5, params: {mode: overflow_streak, steps: 0}}"),
            "t.yaml:5:79: 'steps' must be >= 1, got 0");
  EXPECT_EQ(fault("{kind: straggler, at: 5, target: {rank: 1}, params: {mode: slow_rank, slowdown: 0}}"),
            "t.yaml:5:85: 'slowdown' must be > 0, got 0");
  EXPECT_EQ(fault("{kind: zero_grad_rank, at: 5, target: {rank: 1}, params: {mode: zeroed_buffer, mode: skipped_backward}}"),
            "t.yaml:5:84: duplicate key 'mode' in params");
  // accepted: an integer param written as an integer, a number param written as an integer
  const Scenario ok = load_scenario_text(
      "name: x\nworld_size: 2\nfaults:\n  - {kind: data_replay, at: 5, params: {mode: cycle_window, window: 3}}\n"
      "  - {kind: run_not_alive, at: 9, target: {rank: 1}, params: {mode: hang, timeout_s: 40}}\n"
      "expect: {cause: data_replay}\n",
      "t.yaml");
  EXPECT_EQ(ok.faults[0].params.at("window"), 3.0);
  EXPECT_EQ(ok.faults[1].params.at("timeout_s"), 40.0);
}

TEST(Scenario, BadMode) {
  EXPECT_EQ(load_error("name: x\nfaults:\n  - {kind: lr_zero, at: 5, params: {mode: nope}}\nexpect: {cause: lr_zero}\n"),
            "t.yaml:3:43: fault 'lr_zero' has no mode 'nope'");
  std::string e = load_error("name: x\nfaults:\n  - {kind: lr_zero, at: 5}\nexpect: {cause: lr_zero}\n");
  EXPECT_EQ(e, "t.yaml:3:5: fault 'lr_zero' needs params.mode (finished_schedule_on_resume | "
               "schedule_total_too_short | scheduler_not_stepped)");
}

TEST(Scenario, AtAndRangeBoth) {
  std::string e = load_error(R"(name: x
faults:
  - kind: zero_grad_rank
    at: 10
    range: {start: 5, end: 50}
    params: {mode: zeroed_buffer}
expect: {cause: zero_grad_rank}
)");
  EXPECT_EQ(e, "t.yaml:5:12: give either 'at' or 'range', not both");
  e = load_error("name: x\nfaults:\n  - {kind: zero_grad_rank, params: {mode: zeroed_buffer}}\nexpect: {cause: "
                 "zero_grad_rank}\n");
  EXPECT_EQ(e, "t.yaml:3:5: a fault needs 'at' (a step) or 'range: {start, end}'");
}

TEST(Scenario, TargetRankOutsideWorld) {
  std::string e = load_error(R"(name: x
world_size: 2
faults:
  - kind: zero_grad_rank
    at: 10
    target: {rank: 2}
    params: {mode: zeroed_buffer}
expect: {cause: zero_grad_rank, rank: 2}
)");
  EXPECT_EQ(e, "t.yaml:6:13: target rank 2 is outside world_size 2");
  e = load_error("name: x\nworld_size: 2\nfaults:\n  - {kind: zero_grad_rank, at: 1, target: {rank: -1}, params: "
                 "{mode: zeroed_buffer}}\nexpect: {cause: zero_grad_rank}\n");
  EXPECT_EQ(e, "t.yaml:4:50: 'rank': expected a rank >= 0 or 'all', got -1");
}

TEST(Scenario, MissingExpect) {
  EXPECT_EQ(load_error("name: x\nsteps: 10\n"),
            "t.yaml:1:1: a scenario needs 'expect: {cause: ...}' (healthy for a clean twin)");
}

TEST(Scenario, OtherValueErrors) {
  EXPECT_EQ(load_error("name: x\nexpect: {cause: lr_zero_typo}\n"),
            "t.yaml:2:17: 'cause': expected data_replay | healthy | loss_scale_collapse | lr_zero | run_not_alive | "
            "straggler | unexplained_plateau | zero_grad_rank, got 'lr_zero_typo'");
  EXPECT_EQ(load_error("name: x\nsteps: 0\nexpect: {cause: healthy}\n"), "t.yaml:2:8: 'steps' must be >= 1, got 0");
  EXPECT_EQ(load_error("name: x\noptimizer: {kind: adamw, betas: [0.9, 1.0]}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:39: 'betas[1]' must be in [0, 1), got 1");
  EXPECT_EQ(load_error("name: x\noptimizer: {betas: [-0.1, 0.99]}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:21: 'betas[0]' must be in [0, 1), got -0.1");
  EXPECT_EQ(load_error("name: x\nrestart: {at: 5}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:10: 'restart' needs 'checkpoint: {every: N}' to resume from");
  EXPECT_EQ(load_error("name: x\nmodel: {kind: cnn}\nexpect: {cause: healthy}\n"),
            "t.yaml:1:1: model 'cnn' cannot train on data 'text' (gpt needs text, cnn needs fashion_mnist)");
  EXPECT_EQ(load_error("name: x\nmodel: {n_embd: 30, n_head: 4}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:8: n_embd (30) must be divisible by n_head (4)");
  EXPECT_EQ(load_error("name: x\nsteps: [1\nexpect: {cause: healthy}\n").rfind("t.yaml:", 0), 0u);
  std::string e = load_error("name: x\nsteps: [1\n");
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(Scenario, MissingFileErrorNamesIt) {
  try {
    load_scenario_file("/nonexistent/flatline/x.yaml");
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/flatline/x.yaml: no such file");
  }
}

void expect_equal(const Scenario& a, const Scenario& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.model.kind, b.model.kind);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.n_embd, b.model.n_embd);
  EXPECT_EQ(a.model.block_size, b.model.block_size);
  EXPECT_EQ(a.model.tied_head, b.model.tied_head);
  EXPECT_EQ(a.model.channels, b.model.channels);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.data.kind, b.data.kind);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.eval_fraction, b.data.eval_fraction);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.batch_size, b.batch_size);
  EXPECT_EQ(a.grad_accum, b.grad_accum);
  EXPECT_EQ(a.optimizer.kind, b.optimizer.kind);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.grad_clip, b.optimizer.grad_clip);
  EXPECT_EQ(a.optimizer.momentum, b.optimizer.momentum);
  EXPECT_EQ(a.schedule.kind, b.schedule.kind);
  EXPECT_EQ(a.schedule.warmup, b.schedule.warmup);
  EXPECT_EQ(a.schedule.total, b.schedule.total);
  EXPECT_EQ(a.schedule.min_lr, b.schedule.min_lr);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.checkpoint_every, b.checkpoint_every);
  EXPECT_EQ(a.restart_at, b.restart_at);
  EXPECT_EQ(a.eval_every, b.eval_every);
  EXPECT_EQ(a.eval_batches, b.eval_batches);
  EXPECT_EQ(a.heartbeat_s, b.heartbeat_s);
  EXPECT_EQ(a.collective_timeout_s, b.collective_timeout_s);
  EXPECT_EQ(a.log_every, b.log_every);
  EXPECT_EQ(a.fleet_only, b.fleet_only);
  ASSERT_EQ(a.faults.size(), b.faults.size());
  for (size_t i = 0; i < a.faults.size(); ++i) {
    const FaultSpec &x = a.faults[i], &y = b.faults[i];
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.mode, y.mode);
    EXPECT_EQ(x.at, y.at);
    EXPECT_EQ(x.range_start, y.range_start);
    EXPECT_EQ(x.range_end, y.range_end);
    EXPECT_EQ(x.range_every, y.range_every);
    EXPECT_EQ(x.probability, y.probability);
    EXPECT_EQ(x.lifetime_steps, y.lifetime_steps);
    EXPECT_EQ(x.target_rank, y.target_rank);
    EXPECT_EQ(x.params, y.params);
  }
  EXPECT_EQ(a.expect.cause, b.expect.cause);
  EXPECT_EQ(a.expect.rank, b.expect.rank);
  EXPECT_EQ(a.expect.within_steps, b.expect.within_steps);
}

TEST(Scenario, ToYamlReloadsToAnEqualScenario) {
  Scenario a = load_scenario_file(test_data("scenarios/lr_cosine_400_of_1000.yaml"));
  std::string y = to_yaml(a);
  Scenario b = load_scenario_text(y, "resolved");
  expect_equal(a, b);
  EXPECT_EQ(to_yaml(b), y);  // a fixed point
  EXPECT_NE(y.find("lr: 0.003,"), std::string::npos) << y;  // shortest form, for people reading manifests
}

TEST(Scenario, ToYamlReloadsEveryOption) {
  Scenario a = load_scenario_text(R"(name: "every.option_quoted-1"
seed: 18446744073709551615
model: {kind: cnn, channels: 8, hidden: 32}
data: {kind: fashion_mnist, path: /usr/share/datasets/fashion-mnist, eval_fraction: 0.1}
world_size: 4
steps: 500
batch_size: 8
grad_accum: 2
optimizer: {kind: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0, grad_clip: 0, eps: 1.0e-6}
schedule: {kind: linear, warmup: 20, total: 400, min_lr: 1.0e-5}
precision: fp16
checkpoint: {every: 100}
restart: {at: 250}
eval: {every: 50, batches: 2}
heartbeat_s: 0.25
collective_timeout_s: 12.5
log_every: 5
fleet_only: true
faults:
  - kind: zero_grad_rank
    range: {start: 100, end: 300, every: 10}
    probability: 0.25
    lifetime: {steps: 7}
    target: {rank: 3}
    params: {mode: skipped_backward}
  - kind: run_not_alive
    at: 320
    target: {rank: all}
    params: {mode: hang, timeout_s: 45}
expect: {cause: zero_grad_rank, rank: 3, within_steps: 20}
)",
                                  "t.yaml");
  std::string y = to_yaml(a);
  Scenario b = load_scenario_text(y, "resolved");
  expect_equal(a, b);
  EXPECT_EQ(to_yaml(b), y);
  EXPECT_EQ(b.seed, 18446744073709551615u);
  EXPECT_EQ(b.optimizer.momentum, 0.9);
  EXPECT_EQ(b.log_every, 5);
  EXPECT_TRUE(b.fleet_only);
  EXPECT_EQ(b.faults[0].probability, 0.25);
  EXPECT_EQ(b.faults[1].params.at("timeout_s"), 45.0);
}

TEST(Scenario, ToYamlOfAHealthyScenarioReloads) {
  Scenario a = load_scenario_text("name: clean\nexpect: {cause: healthy}\n", "t.yaml");
  Scenario b = load_scenario_text(to_yaml(a), "resolved");
  expect_equal(a, b);
}

}  // namespace
}  // namespace flatline

namespace flatline {
namespace {

// A name that could climb out of --out (the run directory is replaced), non-finite numbers, keys
// given twice, faults after the last step and expectations outside the world are refused.
TEST(Scenario, RefusesValuesThatCannotBeRight) {
  EXPECT_EQ(load_error("name: ..\nexpect: {cause: healthy}\n"),
            "t.yaml:1:7: 'name': expected letters, digits, '.', '_' or '-' (it names the run directory), got '..'");
  EXPECT_NE(load_error("name: a/b\nexpect: {cause: healthy}\n").find("t.yaml:1:7: 'name'"), std::string::npos);
  EXPECT_NE(load_error("name: ''\nexpect: {cause: healthy}\n").find("t.yaml:1:7: 'name'"), std::string::npos);
  EXPECT_EQ(load_error("name: a\noptimizer: {lr: .nan}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:17: 'lr': expected a finite number, got '.nan'");
  EXPECT_EQ(load_error("name: a\nsteps: 10\nsteps: 20\nexpect: {cause: healthy}\n"),
            "t.yaml:3:1: duplicate key 'steps' in the scenario");
  EXPECT_EQ(load_error("name: a\nworld_size: 2\nsteps: 60\nfaults:\n  - {kind: zero_grad_rank, at: 500, target: {rank: 1}, "
                       "params: {mode: zeroed_buffer}}\nexpect: {cause: zero_grad_rank, rank: 1}\n"),
            "t.yaml:5:5: the fault starts at step 500, after the run's last step 60");
  EXPECT_EQ(load_error("name: a\nworld_size: 2\nexpect: {cause: zero_grad_rank, rank: 9}\n"),
            "t.yaml:3:39: expected rank 9 is outside world_size 2");
  EXPECT_EQ(load_error("name: a\ndata: {kind: text, path: /no/such/corpus}\nexpect: {cause: healthy}\n"),
            "t.yaml:2:26: 'path': no such file or directory: /no/such/corpus");
  EXPECT_NE(load_error("name: a\n? [x, y]\n: 1\nexpect: {cause: healthy}\n").find("t.yaml:2:"), std::string::npos);
}

}  // namespace
}  // namespace flatline
