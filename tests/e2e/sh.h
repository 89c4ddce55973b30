// The end-to-end tests' way to run the flatline binary: a command line after `flatline`, its stdout
// and stderr together, its exit status.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace flatline::e2e {

inline std::string sh(const std::string& args, int* status) {
  FILE* p = popen((std::string(FLATLINE_BIN) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *status = WEXITSTATUS(pclose(p));
  return out;
}

}  // namespace flatline::e2e
