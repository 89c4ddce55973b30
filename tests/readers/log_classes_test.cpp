// The classes of real logs that once went wrong (tests/data/logs/wild/ holds real examples of each),
// on small logs written here: a clean exit followed by the shutdown's c10d noise is healthy; ranks
// dying of CUDA OOM are a crash, named with the rank and the error, and apart from a hang; a run stopped
// for half an hour and then killed is a hang; a script's per-epoch prints are read; a loss at zero is no
// plateau to explain; a traceback that is the log's last word is a crash, one followed by more steps
// was caught.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {

std::string megatron_iterations(int from, int to, int total, double ms) {
  std::string out;
  for (int it = from; it <= to; ++it)
    out += fmt::format(
        "[2024-05-01 10:{:02d}:{:02d}] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration "
        "(ms): {:.1f} | learning rate: 2.000000E-04 | global batch size:    32 | lm loss: {:.6E} | loss scale: 65536.0 | "
        "grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n",
        it / 6, (it % 6) * 10, it, total, it * 32, ms, 6.0 - it * 0.02);
  return out;
}

TEST(LogClasses, ACleanExitFollowedByShutdownNoiseIsHealthy) {
  const std::string p = temp_file("classes/teardown.log",
                                  megatron_iterations(1, 30, 30, 812.3) +
                                      "[2024-05-01 10:06:00] [after training is done] datetime: 2024-05-01 10:06:00\n"
                                      "[rank1]:[W501 10:06:01.123 TCPStore.cpp:125] [c10d] recvValue failed on "
                                      "SocketImpl(fd=45): failed to recv, got 0 bytes. Connection reset by peer\n");
  Warnings w;
  Diagnosis d = diagnose(p, "auto", &w);
  EXPECT_EQ(d.cause, "healthy") << to_text(d);
  ASSERT_FALSE(w.empty());
  EXPECT_NE(w.back().find("after the run's normal end: read as shutdown noise, not a failure"), std::string::npos)
      << w.back();
}

TEST(LogClasses, RanksDyingOfOutOfMemoryAreACrashWithTheRankAndTheError) {
  const std::string p = temp_file(
      "classes/oom.log",
      megatron_iterations(1, 5, 50, 9000) +
          "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
          "of 79.15 GiB of which 1.02 GiB is free.\n"
          "W0501 10:01:02.000000 1400 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1234 closing "
          "signal SIGTERM\n");
  Diagnosis d = diagnose(p);
  EXPECT_EQ(d.cause, "run_not_alive") << to_text(d);
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_EQ(d.evidence[0].rfind("the run died (a crash, not a hang) after step 5: rank 3: torch.OutOfMemoryError: CUDA "
                                "out of memory",
                                0),
            0u)
      << d.evidence[0];
}

TEST(LogClasses, AScriptsPerEpochPrintsAreReadAndAFlatOneIsSaidSo) {
  std::string healthy, flat;
  for (int e = 1; e <= 30; ++e) {
    healthy += fmt::format("Epoch {}/30 - Train Loss: {:.4f}, Val Loss: {:.4f}\n", e, 4.0 / e + 1, 4.2 / e + 1);
    flat += fmt::format("2025-06-22 20:17:{:02d},666 INFO: Epoch {}: Train Loss {:.6f} | Val Loss 0.96 | LR 5.00e-05\n",
                        e, e, 0.9600 + 0.0004 * ((e * 7) % 5));
  }
  Diagnosis d = diagnose(temp_file("classes/epochs.log", healthy));
  EXPECT_EQ(d.cause, "healthy") << to_text(d);
  EXPECT_EQ(d.last_step, 30);
  d = diagnose(temp_file("classes/flat.log", flat));
  EXPECT_EQ(d.cause, "unexplained_plateau") << to_text(d);
  EXPECT_TRUE(d.plateau.sparse);
  bool said = false;
  for (const auto& e : d.evidence) said |= e.rfind("how sure: a sparse log, 30 loss values (a full window is 40)", 0) == 0;
  EXPECT_TRUE(said) << to_text(d);
}

TEST(LogClasses, AScriptsPerIterationPrintsAreReadWithTheIterationAsTheStep) {
  std::string its, both;
  for (int i = 0; i < 60; ++i) {
    its += fmt::format("0: Iteration {}: loss={:.4f}\n", i, 6.0 / (1 + 0.1 * i));  // srun --label's "0: "
    both += fmt::format("Epoch {} step {:5d} | loss {:.4f}\n", i / 20, 100 * (i + 1), 6.0 / (1 + 0.1 * i));
  }
  LogData log = read_log(temp_file("classes/iterations.log", its));
  ASSERT_EQ(log.records.size(), 60u);
  EXPECT_EQ(log.records[59].step, 60);  // a 0-based counter is read from 1: "Iteration 0" is the first step
  EXPECT_NEAR(*log.records[59].loss, 6.0 / 6.9, 1e-4);
  log = read_log(temp_file("classes/epoch-and-step.log", both));
  ASSERT_EQ(log.records.size(), 60u);
  EXPECT_EQ(log.records[59].step, 6000);  // the finer counter
  EXPECT_EQ(*log.records[59].epoch, 2);
  EXPECT_EQ(diagnose(temp_file("classes/epoch-and-step.log", both)).cause, "healthy");
}

TEST(LogClasses, ALossFlatAtZeroIsNoPlateauToExplain) {
  std::string csv = "epoch,loss\n";
  for (int e = 0; e < 60; ++e) csv += fmt::format("{},{}\n", e, e < 5 ? 0.5 / (e + 1) : 0.0);
  Diagnosis d = diagnose(temp_file("classes/zero.csv", csv));
  EXPECT_EQ(d.cause, "healthy") << to_text(d);
}

TEST(LogClasses, ATracebackThatEndsTheLogIsACrashAndOneCaughtIsNot) {
  const std::string trace =
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 88, in <module>\n"
      "    batch = next(it)\n"
      "KeyError: Caught KeyError in DataLoader worker process 0.\n"
      "Original Traceback (most recent call last):\n"
      "  File \"dataset.py\", line 52, in __getitem__\n"
      "KeyError: 8\n";
  // the program's last word, and no later step (tqdm's bar closing on the same step is none)
  const std::string died = temp_file("classes/traceback.log", megatron_iterations(1, 12, 50, 812.3) + trace +
                                                                 " 24%|##        | 12/50 [00:10<00:31,  1.20it/s]\n");
  Diagnosis d = diagnose(died);
  EXPECT_EQ(d.cause, "run_not_alive") << to_text(d);
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_EQ(d.evidence[0], "the run died (a crash, not a hang) after step 12: uncaught exception, the process ended: "
                           "KeyError: Caught KeyError in DataLoader worker process 0.");
  // the same traceback printed by a handler, and training goes on to its end
  const std::string caught = temp_file("classes/caught.log", megatron_iterations(1, 12, 50, 812.3) + trace +
                                                                 megatron_iterations(13, 50, 50, 812.3));
  EXPECT_EQ(diagnose(caught).cause, "healthy");
  // an exception line outside a traceback is only text
  const std::string text = temp_file("classes/text.log", megatron_iterations(1, 12, 50, 812.3) + "KeyError: 8\n");
  EXPECT_EQ(diagnose(text).cause, "healthy");
}

}  // namespace
}  // namespace flatline::testing
