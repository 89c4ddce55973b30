// External detectors through the feed (external/feed.h): small shell detectors that behave well
// or badly, fed a synthetic two-rank stream; stamps, alarm parsing, and every error with its reason in
// bounded time.
#include "external/feed.h"

#include "core/supervisor.h"
#include "telemetry/jsonl.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

namespace flatline {
namespace {
namespace fs = std::filesystem;

// Two ranks, steps 1..n, 10 ms a step; lr 1e-3 until `zero_from`, then 0. Rank 1's record of a step
// comes 1 ms after rank 0's.
std::vector<Record> stream(int n = 60, int zero_from = 40) {
  std::vector<Record> out;
  for (int s = 1; s <= n; ++s)
    for (int rank = 0; rank < 2; ++rank) {
      Record r;
      r.rank = rank;
      r.step = s;
      r.t = 0.01 * s + 0.001 * rank;
      r.loss = 3.0 - 0.01 * s;
      r.lr = s >= zero_from ? 0.0 : 1e-3;
      out.push_back(r);
    }
  return out;
}

FeedOptions opts(FeedMode mode = FeedMode::unpaced) {
  FeedOptions o;
  o.mode = mode;
  o.world_size = 2;
  o.run_dir = fs::temp_directory_path().string();
  o.limits.stall_s = 3;
  o.limits.exit_s = 3;
  return o;
}

ExternalOutcome one(const std::string& command, FeedOptions o = opts(), std::vector<Record> recs = stream(),
                    double speed = 1.0) {
  auto out = feed_recorded(recs, {{"d", command}}, std::move(o), speed);
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ExternalDetector, ParsesNameEqualsCommand) {
  auto d = parse_detector_spec("null=cat > /dev/null");
  EXPECT_EQ(d.name, "null");
  EXPECT_EQ(d.command, "cat > /dev/null");
  EXPECT_THROW(parse_detector_spec("no-command"), std::invalid_argument);
  EXPECT_THROW(parse_detector_spec("=cat"), std::invalid_argument);
  EXPECT_THROW(parse_detector_spec("a b=cat"), std::invalid_argument);
  EXPECT_THROW(parse_detector_spec("x=  "), std::invalid_argument);
}

TEST(ExternalDetector, NullDetectorReadsEveryRecordAndRaisesNothing) {
  auto r = one("cat > /dev/null");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_TRUE(r.alarms.empty());
  EXPECT_EQ(r.records_fed, 120);
  EXPECT_EQ(r.records_read, 120);
}

TEST(ExternalDetector, StdinIsTheTelemetryContractInTimeOrder) {
  const fs::path copy = fs::temp_directory_path() / ("flatline-feed-copy-" + std::to_string(std::random_device{}()));
  auto r = one("cat > " + copy.string());
  EXPECT_EQ(r.error, "");
  std::ifstream in(copy);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, R"({"kind":"step","rank":0,"t":0.01,"step":1,"loss":2.99,"lr":0.001})");
  EXPECT_EQ(second, R"({"kind":"step","rank":1,"t":0.011,"step":1,"loss":2.99,"lr":0.001})");
  fs::remove(copy);
}

// Lock-step: an alarm is stamped with the record the detector had read when it wrote it.
TEST(ExternalDetector, UnpacedAlarmIsStampedWithTheRecordThatFiredIt) {
  auto r = one(R"(while read -r l; do case "$l" in *'"lr":0}'*) echo '{"cause":"lr_zero","evidence":"lr is 0","step":7}';; esac; done)");
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.alarms.size(), 42u);  // steps 40..60 on two ranks: later alarms are kept, reported
  EXPECT_EQ(r.alarms[0].cause, "lr_zero");
  EXPECT_EQ(r.alarms[0].step, 40);
  EXPECT_DOUBLE_EQ(r.alarms[0].t, 0.40);
  EXPECT_EQ(r.alarms[1].step, 40);
  EXPECT_DOUBLE_EQ(r.alarms[1].t, 0.401);
  EXPECT_EQ(r.alarms[2].step, 41);
  EXPECT_EQ(r.alarms[0].claimed_step, 7);
  ASSERT_EQ(r.alarms[0].evidence.size(), 1u);
  EXPECT_EQ(r.alarms[0].evidence[0], "lr is 0");
  EXPECT_EQ(r.alarms[0].line, 1u);
}

TEST(ExternalDetector, DetectionOnlyAlarmAndRankAndEvidenceList) {
  auto r = one(R"(head -n 3 > /dev/null; echo '{"rank":1,"evidence":["a","b"],"confidence":0.5}'; cat > /dev/null)");
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.alarms.size(), 1u);
  EXPECT_EQ(r.alarms[0].cause, "");
  EXPECT_EQ(r.alarms[0].rank, 1);
  EXPECT_EQ(r.alarms[0].evidence, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.alarms[0].confidence, 0.5);
  EXPECT_EQ(r.alarms[0].step, 2);  // the third record: step 2, rank 0
}

TEST(ExternalDetector, ClosingStdinIsNotAnError) {
  auto r = one("exec 0<&-; sleep 0.2; echo '{}'");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.alarms.size(), 1u);
}

TEST(ExternalDetector, CrashIsADetectorErrorWithStatusAndStderr) {
  auto r = one("head -n 5 > /dev/null; echo 'Traceback: boom' >&2; exit 3");
  EXPECT_EQ(r.error, "exited with status 3");
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_EQ(r.stderr_tail, "Traceback: boom");
  r = one("kill -SEGV $$");
  EXPECT_EQ(r.error, "killed by signal 11 (Segmentation fault)");
  r = one("no-such-detector-program-xyz");
  EXPECT_EQ(r.error, "exited with status 127 (command not found?)");
}

TEST(ExternalDetector, GarbageNamesTheLineAndWhy) {
  auto r = one("read -r l; echo '{}'; echo 'loss looks flat'; cat > /dev/null");
  EXPECT_EQ(r.error, "garbage on stdout line 2: not a JSON object: 'loss looks flat'");
  EXPECT_EQ(r.alarms.size(), 1u);
  r = one(R"(echo '{"cuase":"lr_zero"}'; cat > /dev/null)");
  EXPECT_EQ(r.error, "garbage on stdout line 1: unknown key 'cuase' (expected cause, rank, evidence, step, confidence)");
  r = one(R"(echo '{"cause":"lr_is_zero"}'; cat > /dev/null)");
  EXPECT_NE(r.error.find("garbage on stdout line 1: unknown cause 'lr_is_zero' (expected one of: "), std::string::npos)
      << r.error;
  r = one(R"(echo '{"rank":2}'; cat > /dev/null)");
  EXPECT_EQ(r.error, "garbage on stdout line 1: 'rank' must be an integer in [0, 2), got 2");
  // "healthy" is no alarm: an alarm says something is wrong
  r = one(R"(echo '{"cause":"healthy"}'; cat > /dev/null)");
  EXPECT_NE(r.error.find("unknown cause 'healthy' (expected one of: run_not_alive, "), std::string::npos) << r.error;
}

// Every verdict the built-in suite can give but healthy may be named: unexplained_plateau included.
TEST(ExternalDetector, MayNameTheUnexplainedPlateauVerdict) {
  auto r = one(R"(read -r l; echo '{"cause":"unexplained_plateau","evidence":"flat at ln 4"}'; cat > /dev/null)");
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.alarms.size(), 1u);
  EXPECT_EQ(r.alarms[0].cause, "unexplained_plateau");
  EXPECT_EQ(r.alarms[0].step, 1);  // stamped with the one record it had read
  const auto& c = alarm_causes();
  EXPECT_NE(std::find(c.begin(), c.end(), "unexplained_plateau"), c.end());
  EXPECT_EQ(std::find(c.begin(), c.end(), "healthy"), c.end());
}

TEST(ExternalDetector, FloodIsStoppedInBoundedTime) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = one(R"(yes '{"cause":"lr_zero"}')");
  EXPECT_LT(seconds_since(t0), 10);
  EXPECT_EQ(r.error, "flood: more than 1000 alarm lines");
  EXPECT_EQ(r.exit_status, 137);  // killed by the harness
}

// Two shapes (docs/DETECTORS.md): a detector that has read nothing of its stdin kWatcherAfterS after its
// first record is a file watcher, fed by time and ended by the harness at the end (not an error); one
// that reads some of it and then keeps it open and full is an error after the stall.
TEST(ExternalDetector, NeverReadingStdinIsAWatcherAndStoppingHalfWayIsAnError) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = one("sleep 60");
  EXPECT_LT(seconds_since(t0), 10);  // 2 s to be a watcher; ended at stall_s (3 s) after its start, 1 s grace
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.watcher);
  EXPECT_TRUE(r.ended_by_harness);
  EXPECT_EQ(r.exit_status, 128 + SIGTERM);
  r = one("head -n 10 > /dev/null; sleep 60");
  EXPECT_FALSE(r.watcher);
  EXPECT_EQ(r.error, "stopped reading stdin after 10 of 120 records: nothing read for 3 s");
}

// A slow starter (a Python detector importing its libraries) that reads its first line after 3 s is a
// watcher for a while, then a stdin reader again: it reads every record and is not ended early.
TEST(ExternalDetector, ASlowStarterThatBeginsToReadIsAStdinReaderAgain) {
  auto r = one(R"(sleep 3; while read -r l; do case "$l" in *'"lr":0}'*) echo '{"cause":"lr_zero"}'; cat > /dev/null; exit 0;; esac; done)");
  EXPECT_EQ(r.error, "");
  EXPECT_FALSE(r.watcher);
  EXPECT_FALSE(r.ended_by_harness);
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.records_read, 120);
  ASSERT_EQ(r.alarms.size(), 1u);
  EXPECT_GE(r.alarms[0].step, 40);  // stamped at arrival: it reads on (cat) while its alarm is read
}

// A replay re-enacts the run's files for each detector (FeedOptions::on_release); here the records go to
// one JSONL file per detector, as the re-enactment writes rank files. `watch` alarms on the first line
// with lr 0 it finds in the file.
struct Reenacted {
  std::string dir = (fs::temp_directory_path() / ("flatline-watch-" + std::to_string(std::random_device{}()))).string();
  Reenacted() { fs::create_directories(dir); }
  ~Reenacted() { fs::remove_all(dir); }
  FeedOptions opts(FeedMode mode = FeedMode::unpaced) {
    FeedOptions o = flatline::opts(mode);
    o.on_release = [d = dir](size_t, const Record& r) { std::ofstream(d + "/rank.jsonl", std::ios::app) << to_json(r) << "\n"; };
    return o;
  }
  std::string watch(const std::string& prelude) const {
    return prelude + "while sleep 0.02; do if grep -qE '\"lr\": ?0(,|\\})' " + dir +
           "/rank.jsonl 2>/dev/null; then echo '{\"cause\":\"lr_zero\"}'; break; fi; done; sleep 60";
  }
};

std::vector<Record> slow_stream(int n, int zero_from, double step_s) {
  auto recs = stream(n, zero_from);
  for (auto& r : recs) r.t = step_s * static_cast<double>(r.step) + 0.001 * r.rank;
  return recs;
}

// Unpaced, a watcher's files grow by the recorded clock whatever it reads: a watcher that closed stdin
// (exec 0<&-) and one that keeps it open but never reads it (a shell between flatline and the program)
// both see lr 0 at step 40 of a 3 s run, are stamped with the newest step in their files (never before
// step 40, and within the 0.3 s they poll), and end at the harness's SIGTERM with their alarm counted.
TEST(ExternalDetector, AFileWatcherIsFedByTheRecordedClockAndStampedByItsFiles) {
  for (const std::string prelude : {"exec 0<&-; ", ""}) {
    Reenacted re;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = one(re.watch(prelude), re.opts(), slow_stream(100, 40, 0.03));
    const double took = seconds_since(t0);
    EXPECT_EQ(r.error, "") << prelude;
    EXPECT_TRUE(r.watcher) << prelude;
    EXPECT_TRUE(r.ended_by_harness) << prelude;
    EXPECT_GE(took, 3.0 - 0.03) << "not paced by the recorded clock";  // 100 steps of 30 ms, then the end
    EXPECT_LT(took, 10);
    ASSERT_EQ(r.alarms.size(), 1u) << prelude;
    EXPECT_GE(r.alarms[0].step, 40) << "stamped before the data it alarmed on; t " << r.alarms[0].t << " read " << r.records_read << " fed " << r.records_fed << " line " << r.alarms[0].line;
    if (prelude.empty()) {
      // never read: a watcher from kWatcherAfterS (2 s = step ~66) on, its files shown up to then at once
      EXPECT_LE(r.alarms[0].step, 80);
    } else {
      EXPECT_LE(r.alarms[0].step, 50);  // 0.3 s of polling and start-up
    }
    EXPECT_EQ(r.alarms[0].cause, "lr_zero");
  }
}

// A watcher that starts slowly (a Python interpreter on a loaded host) is a watcher by its silence
// first; closing stdin later declares it, and it is ended 1 s after the run, not stall_s after its start.
// A watcher that closes its stdin and sleeps on: ended by the harness soon after the run, well before
// stall_s (30 s here); `why` says what a failure means.
void ends_as_a_declared_watcher(const std::string& command, const char* why) {
  FeedOptions o = opts();
  o.limits.stall_s = 30;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = one(command, o);
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.watcher);
  EXPECT_TRUE(r.ended_by_harness);
  EXPECT_LT(seconds_since(t0), 10) << why;
}

TEST(ExternalDetector, AWatcherThatClosesStdinLateIsEndedAsADeclaredOne) {
  ends_as_a_declared_watcher("sleep 3; exec 0<&-; sleep 60", "waited for stall_s as if it had never closed stdin");
}

TEST(ExternalDetector, ASimpleCommandIsExecdSoItsOwnCloseOfStdinIsSeen) {
  EXPECT_EQ(shell_script("python3 watch.py --dir 'runs/a b'"), "exec python3 watch.py --dir 'runs/a b'");
  EXPECT_EQ(shell_script("  ./detector"), "exec   ./detector");
  EXPECT_EQ(shell_script("python3 -c 'import os; f(1)' 2> err.log"), "exec python3 -c 'import os; f(1)' 2> err.log");
  EXPECT_EQ(shell_script("./x --dir \"$RUN\""), "exec ./x --dir \"$RUN\"");
  for (const char* kept : {"sleep 3; exec 0<&-; sleep 60", "FOO=1 python3 x.py", "cd d && ./x", "./x &", "exec ./x",
                           "cat | ./x", "if true; then ./x; fi", "( ./x )", "./x 'unbalanced", "./a \\; ./b ; ./c"})
    EXPECT_EQ(shell_script(kept), kept);
  // Under dash a forked child closing its stdin left the shell's copy open: ended only at stall_s.
  ends_as_a_declared_watcher("python3 -c 'import os, time; os.close(0); time.sleep(60)'",
                             "the shell held the watcher's stdin open");
}

// --speed applies to the watchers' clock in an unpaced replay too.
TEST(ExternalDetector, AWatchersClockRunsAtTheReplaySpeed) {
  Reenacted re;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = one(re.watch("exec 0<&-; "), re.opts(), slow_stream(100, 40, 0.1), 5.0);  // a 10 s run at 5x
  const double took = seconds_since(t0);
  EXPECT_EQ(r.error, "");
  EXPECT_GE(took, 2.0 - 0.1);
  EXPECT_LT(took, 8);
  ASSERT_EQ(r.alarms.size(), 1u);
  EXPECT_GE(r.alarms[0].step, 40);
  EXPECT_LE(r.alarms[0].step, 50);
}

// Live, a watcher reads the files the ranks write, which may be ahead of what the feed has released:
// its alarm is stamped with the newest step on disk (FeedOptions::newest_step_on_disk).
TEST(ExternalDetector, ALiveWatcherIsStampedWithTheNewestStepOnDisk) {
  FeedOptions o = opts(FeedMode::live);
  o.newest_step_on_disk = [] { return int64_t{57}; };
  DetectorFeed f({{"w", "exec 0<&-; sleep 0.3; echo '{\"cause\":\"lr_zero\"}'; sleep 60"}}, o);
  const auto recs = stream(20, 10);
  double t = 0;
  for (const auto& r : recs) f.push(r), t = r.t;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 1.0) f.pump(t + seconds_since(t0), 20);
  auto out = f.finish(t + seconds_since(t0));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error, "");
  EXPECT_TRUE(out[0].watcher);
  EXPECT_TRUE(out[0].ended_by_harness);
  ASSERT_EQ(out[0].alarms.size(), 1u);
  EXPECT_EQ(out[0].alarms[0].step, 57);
}

TEST(ExternalDetector, HangAfterTheEndOfInputIsAnError) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = one("cat > /dev/null; sleep 60");
  EXPECT_LT(seconds_since(t0), 10);
  EXPECT_EQ(r.error, "hang: did not exit within 3 s of the end of its input");
  EXPECT_EQ(r.records_read, 120);
}

// Paced: records go out at their recorded time, and the stamp's t is the replay clock at arrival, so
// a detector that takes 2 s to answer is measured 2 s late.
TEST(ExternalDetector, PacedStampsTheClockAtArrival) {
  auto recs = stream(60, 40);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = one(R"(while read -r l; do case "$l" in *'"lr":0}'*) sleep 2; echo '{"cause":"lr_zero"}'; cat > /dev/null; exit 0;; esac; done)",
               opts(FeedMode::paced), recs, 1.0);
  EXPECT_GE(seconds_since(t0), 2);
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.alarms.size(), 1u);
  EXPECT_GE(r.alarms[0].t - 0.40, 2.0);
  EXPECT_LT(r.alarms[0].t - 0.40, 4.0);
  EXPECT_EQ(r.alarms[0].step, 60);  // the replay had reached its end meanwhile
}

TEST(ExternalDetector, SeveralDetectorsAtOnceEachGetsItsOwnOutcome) {
  auto out = feed_recorded(stream(), {{"null", "cat >/dev/null"}, {"crash", "exit 1"}}, opts());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "null");
  EXPECT_EQ(out[0].error, "");
  EXPECT_EQ(out[1].name, "crash");
  EXPECT_EQ(out[1].error, "exited with status 1");
  EXPECT_THROW(feed_recorded(stream(), {{"a", "true"}, {"a", "true"}}, opts()), std::invalid_argument);
}

TEST(ExternalDetector, EnvironmentNamesTheRunDirectoryAndWorldSize) {
  const fs::path env = fs::temp_directory_path() / ("flatline-feed-env-" + std::to_string(std::random_device{}()));
  FeedOptions o = opts();
  o.env = {{"FLATLINE_LOG_TENSORBOARD", "/x/tb"}};
  auto r = one("env > " + env.string() + "; cat > /dev/null", o);
  EXPECT_EQ(r.error, "");
  std::ifstream in(env);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("FLATLINE_RUN_DIR=" + o.run_dir + "\n"), std::string::npos) << all;
  EXPECT_NE(all.find("FLATLINE_WORLD_SIZE=2\n"), std::string::npos);
  EXPECT_NE(all.find("FLATLINE_DETECTOR=d\n"), std::string::npos);
  EXPECT_NE(all.find("FLATLINE_FEED=unpaced\n"), std::string::npos);
  EXPECT_NE(all.find("FLATLINE_LOG_TENSORBOARD=/x/tb\n"), std::string::npos);
  fs::remove(env);
}

}  // namespace
}  // namespace flatline
