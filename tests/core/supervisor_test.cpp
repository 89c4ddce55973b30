// The supervisor of flatline's child processes (core/supervisor.h): what a child wrote, its exit status
// as the launcher and the feed report it, a child that cannot start, and a kept child's whole tree ended.
#include "core/supervisor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/protocol.h"

namespace flatline {
namespace {

// Reads the child's output until it ends (at most 10 s) and reaps it.
std::string run_to_end(Child& c, OutputKeeper& out) {
  const auto t0 = std::chrono::steady_clock::now();
  while (c.out() >= 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    Child::drain(c.out(), out);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(c.reap(/*block=*/true));
  return out.tail;
}

ChildSpec shell(const std::string& script, ChildGroup group = ChildGroup::flatlines) {
  ChildSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.env = child_environment({});
  s.group = group;
  s.what = "test child";
  return s;
}

TEST(Supervisor, AChildsOutputAndExitStatus) {
  Child c(shell("echo out; echo err >&2; exit 3"));
  OutputKeeper out;
  EXPECT_EQ(run_to_end(c, out), "out\nerr\n");  // stdout and stderr on one pipe, as a rank's log
  EXPECT_EQ(c.status(), 3);
  EXPECT_FALSE(c.running());
  EXPECT_EQ(describe_exit(c.wait_status()), "exited with status 3");
}

TEST(Supervisor, ASignalsDeathIsTheShellsStatus) {
  Child c(shell("kill -SEGV $$"));
  OutputKeeper out;
  run_to_end(c, out);
  EXPECT_EQ(c.status(), kExitSignalBase + SIGSEGV);
  EXPECT_EQ(describe_exit(c.wait_status()), "killed by signal 11 (Segmentation fault)");
}

TEST(Supervisor, AProgramThatCannotStartExits127SayingWhy) {
  ChildSpec s = shell("");
  s.argv = {"/no/such/program"};
  s.exec_failure = "cannot exec the program";
  Child c(s);
  OutputKeeper out;
  EXPECT_EQ(run_to_end(c, out), "cannot exec the program\n");
  EXPECT_EQ(c.status(), kExitExecFailed);
  EXPECT_EQ(describe_exit(c.wait_status()), "exited with status 127 (command not found?)");
  ChildSpec in_nowhere = shell("true");
  in_nowhere.cwd = "/no/such/directory";
  Child d(in_nowhere);
  OutputKeeper out2;
  EXPECT_EQ(run_to_end(d, out2), "flatline: test child: cannot enter /no/such/directory\n");
  EXPECT_EQ(d.status(), kExitExecFailed);
}

TEST(Supervisor, TheEnvironmentIsOursWithTheVariablesReplaced) {
  ::setenv("FLATLINE_TEST_A", "old", 1);
  ::setenv("FLATLINE_TEST_B", "gone", 1);
  ChildSpec s = shell("echo \"$FLATLINE_TEST_A ${FLATLINE_TEST_B-unset} $FLATLINE_TEST_C\"");
  s.env = child_environment({{"FLATLINE_TEST_A", "new"}, {"FLATLINE_TEST_C", "c"}}, {"FLATLINE_TEST_B"});
  Child c(s);
  OutputKeeper out;
  EXPECT_EQ(run_to_end(c, out), "new unset c\n");
}

// A kept child's stdin, stdout and stderr are three pipes; kill() ends its whole tree, a process that
// left its group (setsid) included.
TEST(Supervisor, AKeptChildsTreeEndsWithIt) {
  const std::string pid_file =
      (std::filesystem::temp_directory_path() / ("flatline-supervisor-" + std::to_string(::getpid()))).string();
  std::remove(pid_file.c_str());
  Child c(shell("setsid sh -c 'echo $$ > " + pid_file + "; exec sleep 60' & read line; echo \"got $line\"; sleep 60",
                ChildGroup::kept));
  ASSERT_GE(c.in(), 0);
  ASSERT_EQ(Child::write_in(c.in(), "hello\n", 6), 6);
  OutputKeeper out;
  pid_t orphan = 0;
  for (int i = 0; i < 1000 && (out.tail.empty() || orphan == 0); ++i) {
    Child::drain(c.out(), out);
    std::ifstream(pid_file) >> orphan;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(out.tail, "got hello\n");
  ASSERT_GT(orphan, 0);
  EXPECT_EQ(::kill(orphan, 0), 0);  // it runs, in a session of its own
  EXPECT_TRUE(c.running());
  c.kill();
  EXPECT_TRUE(c.reap(/*block=*/true));
  EXPECT_EQ(c.status(), kExitSignalBase + SIGKILL);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = ::kill(orphan, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "the setsid child " << orphan << " outlived its kept parent";
  std::remove(pid_file.c_str());
}

TEST(Supervisor, WritingToAChildThatClosedItsStdinIsEpipeNotSigpipe) {
  Child c(shell("exec 0<&-; sleep 60", ChildGroup::kept));
  ssize_t r = 0;
  for (int i = 0; i < 200 && r >= 0; ++i) {  // until the close is seen
    r = Child::write_in(c.in(), "x\n", 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LT(r, 0);
  EXPECT_EQ(errno, EPIPE);  // and flatline is still here
  c.kill();
  c.reap(true);
}

TEST(Supervisor, TheOutputKeptToAFileIsBoundedAndTheTailKept) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("flatline-keeper-" + std::to_string(::getpid()))).string();
  OutputKeeper k;
  k.file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(k.file, 0);
  k.file_limit = 10;
  k.tail_limit = 4;
  k.take("0123456789abcdef", 16);
  EXPECT_EQ(k.kept, 10u);
  EXPECT_EQ(k.dropped, 6u);
  k.take("ghij", 4);
  EXPECT_EQ(k.dropped, 10u);
  EXPECT_GE(k.tail.size(), 4u);
  EXPECT_EQ(k.tail.substr(k.tail.size() - 4), "ghij");
  k.close_file();
  std::ifstream in(path);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "0123456789");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace flatline
