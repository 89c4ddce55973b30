// Every end-to-end test ends with a check that no process it started is left, nor any of their
// descendants, however they left their process group or parent (setsid, double fork, a detector's
// background child): each test runs with FLATLINE_E2E_TEST=<pid>:<suite>.<name> in its environment,
// which every process it starts inherits (flatline passes its environment on to ranks and detectors),
// and after it, /proc is searched for that entry. A process still there after kLeftoverGraceS is a
// failure naming the test and the process, and is killed so it cannot leak into the next test.
// Included by each e2e program's shared header; registers itself once (an inline variable).
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace flatline::e2e {

constexpr double kLeftoverGraceS = 10;  // processes that are exiting: the harness's own grace is 5 s
constexpr const char* kTestTagVar = "FLATLINE_E2E_TEST";

// Pids (not this one) whose environment holds exactly `entry` ("NAME=value").
inline std::vector<int> processes_with_env(const std::string& entry) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || std::stoi(pid) == getpid()) continue;
    std::string env;
    try {  // a process that exits while it is read: libstdc++ throws the read's ESRCH
      std::ifstream in(e.path() / "environ", std::ios::binary);
      env.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    } catch (const std::exception&) {
      continue;
    }
    for (size_t at = 0; at < env.size();) {
      size_t end = env.find('\0', at);
      if (end == std::string::npos) end = env.size();
      if (env.compare(at, end - at, entry) == 0) {
        out.push_back(std::stoi(pid));
        break;
      }
      at = end + 1;
    }
  }
  return out;
}

inline std::string command_of(int pid) {
  std::string c;
  try {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    c.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    return "(gone)";
  }
  for (char& ch : c)
    if (ch == '\0') ch = ' ';
  return c.substr(0, 200);
}

class NoProcessLeft : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& t) override {
    value_ = std::to_string(getpid()) + ":" + t.test_suite_name() + "." + t.name();
    setenv(kTestTagVar, value_.c_str(), 1);
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    const std::string entry = std::string(kTestTagVar) + "=" + value_;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLeftoverGraceS);
    std::vector<int> left = processes_with_env(entry);
    while (!left.empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = processes_with_env(entry);
    }
    for (int pid : left) {
      ADD_FAILURE() << t.test_suite_name() << "." << t.name() << " left process " << pid << " behind: " << command_of(pid);
      kill(pid, SIGKILL);
    }
    unsetenv(kTestTagVar);
  }
  std::string value_;
};

inline bool register_no_process_left() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new NoProcessLeft);
  return true;
}
inline const bool kNoProcessLeftRegistered = register_no_process_left();

}  // namespace flatline::e2e
