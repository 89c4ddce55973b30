// Every foreign-format writer (telemetry/writers/writer.h) read back by flatline's own reader of that
// format (readers/reader.h): the same records on the fields the format carries, at the precision it
// prints them, for an fp16 stream with two skipped steps, evals, a checkpoint and the run's end.
#include "telemetry/writers/writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "readers/reader.h"

namespace flatline {
namespace {
namespace fs = std::filesystem;

std::vector<Record> fp16_stream() {
  std::vector<Record> out;
  double scale = 65536;
  for (int s = 1; s <= 20; ++s) {
    Record r;
    r.step = s;
    r.t = 0.5 + 0.01 * s;
    r.loss = 3.0 - 0.013 * s;
    r.loss_avg = 3.0 - 0.012 * s;
    r.lr = 1e-3 * s / 20;
    r.grad_norm = 1.0 + 0.1 * s;
    r.param_norm = 20.0 + 0.01 * s;
    r.loss_scale = scale;
    r.overflow = r.skipped = s == 5 || s == 6;
    r.epoch = s > 12;
    r.samples_seen = 8 * s;
    r.step_ms = 6.25;
    if (*r.skipped) scale /= 2;  // GradScaler's backoff: the next step uses half
    out.push_back(r);
    if (s % 10 == 0) {
      Record e;
      e.kind = RecordKind::eval;
      e.step = s;
      e.t = r.t + 0.001;
      e.eval_loss = 2.5 - 0.01 * s;
      out.push_back(e);
      Record c;
      c.kind = RecordKind::event;
      c.step = s;
      c.t = e.t;
      c.name = s == 20 ? "run_end" : "checkpoint_save";
      out.push_back(c);
    }
  }
  return out;
}

struct Written {
  fs::path dir;
  std::map<int64_t, Record> steps, evals;
};

Written write_and_read(const std::string& format) {
  Written w;
  w.dir = fs::temp_directory_path() / ("flatline-writer-" + format + "-" + std::to_string(std::random_device{}()));
  FormatContext c;
  c.run_dir = w.dir.string();
  c.world_size = 2;
  c.global_batch = 16;
  c.train_iters = 20;
  c.beta2 = 0.95;
  c.wall_t0 = 1.7e9;
  {
    FormatSink sink({format}, c);
    for (const auto& r : fp16_stream()) sink.write(r);
    EXPECT_TRUE(sink.errors().empty());
  }
  LogData log = read_log(format_dir(c.run_dir, format), parse_log_format(format));
  EXPECT_EQ(log.format, parse_log_format(format));
  for (const auto& warning : log.warnings) ADD_FAILURE() << format << ": " << warning;
  for (const auto& r : log.records) {
    if (r.kind == RecordKind::step) EXPECT_TRUE(w.steps.emplace(r.step, r).second) << format << " step " << r.step;
    if (r.kind == RecordKind::eval) w.evals.emplace(r.step, r);
  }
  return w;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::fabs(b)); }

// Every step of the stream, with `field` within `tol` (relative) of what was written.
template <class Get>
void expect_field(const Written& w, const std::string& what, Get get_written, double tol,
                  std::optional<double> Record::*field) {
  for (const auto& r : fp16_stream()) {
    if (r.kind != RecordKind::step) continue;
    auto it = w.steps.find(r.step);
    ASSERT_NE(it, w.steps.end()) << what << ": step " << r.step << " not read back";
    const std::optional<double> want = get_written(r);
    if (!want) continue;
    ASSERT_TRUE((it->second.*field).has_value()) << what << " at step " << r.step;
    EXPECT_LE(rel(*(it->second.*field), *want), tol) << what << " at step " << r.step << ": " << *(it->second.*field)
                                                      << " vs " << *want;
  }
}

std::optional<double> rounded4(const Record& r) {
  if (r.skipped.value_or(false)) return std::nullopt;  // the interval's mean leaves skipped steps out
  return std::round(*r.loss_avg * 1e4) / 1e4;
}

TEST(FormatWriters, TensorBoardRoundTrip) {
  Written w = write_and_read("tensorboard");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "loss", rounded4, 1e-6, &Record::loss);
  expect_field(w, "lr", [](const Record& r) { return r.lr; }, 1e-6, &Record::lr);
  expect_field(w, "grad_norm", [](const Record& r) { return r.grad_norm; }, 1e-6, &Record::grad_norm);
  ASSERT_EQ(w.evals.size(), 2u);
  EXPECT_NEAR(*w.evals.at(20).eval_loss, 2.3, 1e-6);
  EXPECT_NEAR(w.steps.at(2).t - w.steps.at(1).t, 0.01, 1e-3);
}

TEST(FormatWriters, HfTrainerStateRoundTrip) {
  Written w = write_and_read("hf");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "loss", rounded4, 0, &Record::loss);
  expect_field(w, "lr", [](const Record& r) { return r.lr; }, 0, &Record::lr);
  expect_field(w, "grad_norm", [](const Record& r) { return r.grad_norm; }, 0, &Record::grad_norm);
  EXPECT_DOUBLE_EQ(*w.evals.at(10).eval_loss, 2.4);
  EXPECT_TRUE(fs::exists(w.dir / "formats/hf/checkpoint-10/trainer_state.json"));
}

TEST(FormatWriters, MegatronRoundTrip) {
  Written w = write_and_read("megatron");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "lm loss", [](const Record& r) { return r.skipped.value_or(false) ? std::nullopt : r.loss_avg; }, 1e-6,
               &Record::loss);
  expect_field(w, "learning rate", [](const Record& r) { return r.lr; }, 1e-6, &Record::lr);
  expect_field(w, "loss scale", [](const Record& r) { return r.loss_scale; }, 0, &Record::loss_scale);
  expect_field(w, "params norm", [](const Record& r) { return r.param_norm; }, 1e-4, &Record::param_norm);
  expect_field(w, "elapsed", [](const Record& r) { return std::optional<double>(6.2); }, 0, &Record::step_ms);
  EXPECT_TRUE(*w.steps.at(5).skipped);
  EXPECT_FALSE(*w.steps.at(7).skipped);
  EXPECT_FALSE(w.steps.at(5).loss);  // Megatron omits the loss of an interval of skipped iterations
  EXPECT_EQ(*w.steps.at(20).samples_seen, 320);  // consumed samples: over both ranks
}

TEST(FormatWriters, DeepSpeedRoundTrip) {
  Written w = write_and_read("deepspeed");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "lr", [](const Record& r) { return r.lr; }, 0, &Record::lr);
  EXPECT_TRUE(*w.steps.at(5).skipped);
  EXPECT_TRUE(*w.steps.at(6).skipped);
  EXPECT_DOUBLE_EQ(*w.steps.at(5).loss_scale, 65536);  // the attempted scale of each overflow
  EXPECT_DOUBLE_EQ(*w.steps.at(6).loss_scale, 32768);
  EXPECT_FALSE(*w.steps.at(7).skipped);
  EXPECT_DOUBLE_EQ(*w.steps.at(7).loss_scale, 16384);  // what the scaler reduced to
}

TEST(FormatWriters, LightningCsvRoundTrip) {
  Written w = write_and_read("lightning");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "train_loss", [](const Record& r) { return r.loss; }, 0, &Record::loss);
  expect_field(w, "lr-AdamW", [](const Record& r) { return r.lr; }, 0, &Record::lr);
  EXPECT_DOUBLE_EQ(*w.evals.at(20).eval_loss, 2.3);
  EXPECT_EQ(*w.steps.at(13).epoch, 1);
}

TEST(FormatWriters, WandbCsvRoundTrip) {
  Written w = write_and_read("wandb");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "train/loss", rounded4, 0, &Record::loss);
  expect_field(w, "train/learning_rate", [](const Record& r) { return r.lr; }, 0, &Record::lr);
  expect_field(w, "train/grad_norm", [](const Record& r) { return r.grad_norm; }, 0, &Record::grad_norm);
  EXPECT_DOUBLE_EQ(w.steps.at(3).t, 0.53);  // _runtime
  EXPECT_DOUBLE_EQ(*w.evals.at(10).eval_loss, 2.4);
}

// The offline run's transaction log, as a watcher tails it: records framed in 32 KiB blocks (the
// stream's 20 steps fit one block; the framing across blocks is the reader's, tests/readers).
TEST(FormatWriters, WandbOfflineRunRoundTrip) {
  Written w = write_and_read("wandb-run");
  EXPECT_EQ(w.steps.size(), 20u);
  expect_field(w, "train/loss", rounded4, 0, &Record::loss);
  expect_field(w, "train/learning_rate", [](const Record& r) { return r.lr; }, 0, &Record::lr);
  expect_field(w, "train/grad_norm", [](const Record& r) { return r.grad_norm; }, 0, &Record::grad_norm);
  EXPECT_DOUBLE_EQ(w.steps.at(3).t, 0.53);  // _runtime
  EXPECT_DOUBLE_EQ(*w.evals.at(10).eval_loss, 2.4);
  size_t logs = 0;
  for (const auto& e : fs::recursive_directory_iterator(w.dir / "formats/wandb-run/wandb")) {
    if (e.path().extension() != ".wandb") continue;
    ++logs;
    EXPECT_EQ(e.path().parent_path().filename().string().rfind("offline-run-", 0), 0u) << e.path();
  }
  EXPECT_EQ(logs, 1u);
}

// Many records: chunks that cross the 32 KiB blocks (FIRST/MIDDLE/LAST), all read back.
TEST(FormatWriters, WandbOfflineRunAcrossBlocks) {
  fs::path d = fs::temp_directory_path() / ("flatline-writer-wandb-" + std::to_string(std::random_device{}()));
  FormatContext c;
  c.run_dir = d.string();
  {
    FormatSink sink({"wandb-run"}, c);
    for (int s = 1; s <= 3000; ++s) {
      Record r;
      r.step = s;
      r.t = 0.01 * s;
      r.loss = 3.0;
      r.lr = 1e-3;
      sink.write(r);
    }
    EXPECT_TRUE(sink.errors().empty());
  }
  LogData log = read_log(format_dir(c.run_dir, "wandb-run"), "wandb-run");
  for (const auto& warning : log.warnings) ADD_FAILURE() << warning;
  int64_t steps = 0, last = 0;
  for (const auto& r : log.records)
    if (r.kind == RecordKind::step) ++steps, last = r.step;
  EXPECT_EQ(steps, 3000);
  EXPECT_EQ(last, 3000);
  fs::remove_all(d);
}

TEST(FormatWriters, LoggingIntervalAndRankZeroOnly) {
  fs::path d = fs::temp_directory_path() / ("flatline-writer-every-" + std::to_string(std::random_device{}()));
  FormatContext c;
  c.run_dir = d.string();
  c.every = 5;
  {
    FormatSink sink({"hf"}, c);
    for (const auto& r : fp16_stream()) sink.write(r);
  }
  LogData log = read_log(format_dir(c.run_dir, "hf"), "hf");
  std::vector<int64_t> steps;
  for (const auto& r : log.records)
    if (r.kind == RecordKind::step) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 10, 15, 20}));
  // the interval's mean, skipped steps left out: steps 1..4 at step 5 (5 is skipped)
  double mean = 0;
  for (int s = 1; s <= 4; ++s) mean += 3.0 - 0.012 * s;
  EXPECT_DOUBLE_EQ(*log.records.front().loss, std::round(mean / 4 * 1e4) / 1e4);
  EXPECT_THROW(make_format_writer("comet", c), std::invalid_argument);
  fs::remove_all(d);
}

}  // namespace
}  // namespace flatline
