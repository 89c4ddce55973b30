// The reader registry (readers/reader.h, readers/registry.h): formats are detected by content first
// and by file name only as a hint; when the chosen reader finds nothing usable the next candidate is
// tried; the final error lists every format tried and why it refused; --format's values come from
// the registry.
#include <gtest/gtest.h>

#include <set>

#include "readers/registry.h"
#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

TEST(Registry, EveryReaderIsCompleteAndNamedOnce) {
  std::set<std::string> names;
  for (const ReaderDef* r : all_readers()) {
    EXPECT_TRUE(names.insert(r->name).second) << r->name;
    EXPECT_NE(r->sniff, nullptr) << r->name;
    EXPECT_NE(r->parse, nullptr) << r->name;
    EXPECT_FALSE(r->summary.empty()) << r->name;
    EXPECT_FALSE(r->name_hints.empty()) << r->name;
    EXPECT_EQ(&reader_named(r->name), r);
  }
  EXPECT_GE(names.size(), 8u);
  EXPECT_EQ(format_choices().substr(0, 18), "auto|flatline|hf|m");
  EXPECT_EQ(parser_for("auto"), nullptr);
  EXPECT_EQ(parse_log_format("auto"), "auto");
}

TEST(Registry, GlobsAndRankPaths) {
  EXPECT_TRUE(glob_match("*tfevents*", "events.out.tfevents.1704110400.host.1.0"));
  EXPECT_TRUE(glob_match("*.jsonl", "rank-0.jsonl"));
  EXPECT_FALSE(glob_match("*.jsonl", "rank-0.jsonl.bak"));
  EXPECT_TRUE(glob_match("trainer_state.json", "trainer_state.json"));
  EXPECT_FALSE(glob_match("trainer_state.json", "xtrainer_state.json"));
  EXPECT_TRUE(glob_match("a?c*", "abcdef"));
  EXPECT_EQ(rank_from_path("/runs/x/rank_3/events.out.tfevents.1"), 3);
  EXPECT_EQ(rank_from_path("/runs/x/rank-12.log"), 12);
  EXPECT_EQ(rank_from_path("/runs/rank1/tb/events"), 1);
  EXPECT_EQ(rank_from_path("/runs/rankings/x.log"), -1);
  EXPECT_EQ(rank_from_path("/runs/x/train.log"), -1);
}

// Lightning's on_step/on_epoch columns (train_loss_step, train_loss_epoch) contain "_step" but are
// not W&B's reserved _step column; CRLF line endings; a name that is not metrics.csv.
TEST(Registry, ContentBeatsTheFileName) {
  const std::string lightning = temp_file("exported/run1.csv",
                                          "epoch,lr-AdamW,step,train_loss_epoch,train_loss_step\r\n"
                                          "0,0.001,9,,2.5\r\n0,0.001,19,,2.4\r\n0,,19,2.45,\r\n");
  LogData l = read_log(lightning);
  EXPECT_EQ(l.format, "lightning");
  ASSERT_EQ(l.records.size(), 2u);
  EXPECT_EQ(l.records[1].step, 19);
  EXPECT_DOUBLE_EQ(*l.records[1].loss, 2.4);  // the _step column, not the epoch aggregate
  EXPECT_EQ(detect_format(lightning, "epoch,lr-AdamW,step,train_loss_epoch,train_loss_step\r\n"), "lightning");
  // A W&B export someone saved as metrics.csv.
  const std::string wandb = temp_file("wb/metrics.csv", "_step,_runtime,train/loss\n0,1.5,2.5\n1,3.0,2.4\n");
  LogData w = read_log(wandb);
  EXPECT_EQ(w.format, "wandb");
  EXPECT_DOUBLE_EQ(w.records[1].t, 3.0);
}

TEST(Registry, NextCandidateWhenTheFirstFindsNothing) {
  // W&B's _step column is there but empty; the rows carry Lightning's step.
  const std::string p = temp_file("fallback/metrics.csv", "_step,step,train_loss\n,1,2.5\n,2,2.4\n");
  std::string used;
  Warnings w;
  auto recs = parse_log_bytes("_step,step,train_loss\n,1,2.5\n,2,2.4\n", p, "auto", &w, &used);
  EXPECT_EQ(used, "lightning");
  EXPECT_EQ(recs.size(), 2u);
  EXPECT_TRUE(w.empty()) << w.front();  // the refused reader's warnings are not the user's
  EXPECT_EQ(read_log(p).format, "lightning");
}

TEST(Registry, TheFinalErrorListsEveryFormatTried) {
  // Both CSV readers may read it (content); the name *.csv is W&B's hint: it goes first.
  const std::string p = temp_file("nothing.csv", "a,b\n1,2\n");
  try {
    read_log(p);
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()),
              p + ": no format could read it (tried wandb: no usable records; lightning: no usable records) (its "
                  "columns: a, b; a table needs a loss column, e.g. loss or train_loss, and a step, an epoch or its rows)");
  }
  // One candidate only: its own message.
  const std::string q = temp_file("one/trainer_state.json", "{\"global_step\": 3}\n");
  try {
    read_log(q);
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), q + ": not a trainer_state.json: no \"log_history\"");
  }
}

TEST(Registry, ForcedFormatIsTheOnlyOneTried) {
  const std::string p = temp_file("forced/run.csv", "_step,_runtime,train/tokens\n0,1.5,2.5\n1,3.0,2.4\n");
  try {
    read_log(p, "lightning");
    FAIL();
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), p + ": no usable records as lightning (its columns: _step, _runtime, train/tokens; a "
                                         "table needs a loss column, e.g. loss or train_loss, and a step, an epoch or its rows)");
  }
  EXPECT_THROW(read_log(p, "csv"), std::invalid_argument);
}

TEST(Registry, DirectoryLayoutsInPriorityOrderWithFallback) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(temp_file("layouts/.keep", "")).parent_path();
  // A directory with an unreadable trainer_state.json and a good Lightning metrics.csv: the HF
  // layout comes first, refuses, and the Lightning one is read.
  temp_file("layouts/trainer_state.json", "{\"log_history\": 5}\n");
  std::ifstream in(logs("lightning/lr_zero/metrics.csv"));
  temp_file("layouts/metrics.csv", std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  LogData d = read_log(root.string());
  EXPECT_EQ(d.format, "lightning");
  EXPECT_EQ(d.records.size(), 64u);
  ASSERT_FALSE(d.warnings.empty());
  EXPECT_EQ(d.warnings[0], (root / "trainer_state.json").string() + ":1: \"log_history\" is not an array");
  EXPECT_EQ(locate_log(root.string()).files, std::vector<std::string>{(root / "trainer_state.json").string()});
}

}  // namespace
}  // namespace flatline::testing

namespace flatline::testing {
namespace {

// CSVLogger files that are not the usual shape, read as Lightning's: a column named by a tensor's repr,
// and an older layout with no step column (the epoch is the step; said once, naming the columns).
TEST(Registry, LightningCsvsOfUnusualShapesAreRead) {
  const std::string a = temp_file("odd/metrics.csv",
                                  "train_loss,out_tensor([0.]),out_tensor([1.]),epoch,step\n"
                                  "0.69,,,0,49\n,0.1,0.9,0,49\n0.52,,,1,99\n,0.2,0.8,1,99\n0.41,,,2,149\n");
  Warnings w;
  LogData log = read_log(a);
  EXPECT_EQ(log.format, "lightning");
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[2].step, 149);
  EXPECT_DOUBLE_EQ(*log.records[2].loss, 0.41);
  const std::string b = temp_file("old/metrics.csv",
                                  "train_loss,epoch,created_at\n"
                                  "2.31,0,1650000000.1\n2.11,1,1650000060.2\n1.95,2,1650000120.3\n");
  log = read_log(b);
  EXPECT_EQ(log.format, "lightning");
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[1].step, 1);
  EXPECT_DOUBLE_EQ(*log.records[1].loss, 2.11);
  ASSERT_FALSE(log.warnings.empty());
  EXPECT_NE(log.warnings.front().find("no step column (columns: train_loss, epoch, created_at): the epoch ('epoch') "
                                      "taken as the step"),
            std::string::npos)
      << log.warnings.front();
  // No epoch either: the rows are the steps.
  const std::string c = temp_file("rows/history.csv", "loss,accuracy\n0.9,0.5\n0.7,0.6\n0.6,0.7\n");
  log = read_log(c);
  ASSERT_EQ(log.records.size(), 3u);
  EXPECT_EQ(log.records[2].step, 3);
}

}  // namespace
}  // namespace flatline::testing
