// Two tiers of errors (docs/DESIGN.md §9 "Errors"). Recoverable failures are typed exceptions that name
// what failed and where: ScenarioError (run/scenario.h), ReadError (readers/reader.h), RankError
// (sim/errors.h: a collective, the file system or a checkpoint failed). A broken invariant is a bug, not
// a failure of the run: FLATLINE_CHECK throws InvariantError with file:line and the condition. Nothing
// catches it but the outermost handler (a worker exits with kExitInvariant, core/protocol.h), so a bug
// never leaves disguised as "a collective failed".
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace flatline {

class InvariantError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] inline void invariant_failed(const char* file, int line, const char* cond, const std::string& why) {
  std::string f = file;
#ifdef FLATLINE_SOURCE_DIR  // name the file as the repository does
  const std::string root = FLATLINE_SOURCE_DIR "/";
  if (f.rfind(root, 0) == 0) f = f.substr(root.size());
#endif
  throw InvariantError(fmt::format("{}:{}: invariant broken: {} ({})", f, line, why, cond));
}

}  // namespace flatline

// FLATLINE_CHECK(cond, "format {}", args...): throws InvariantError when cond is false.
#define FLATLINE_CHECK(cond, ...)                                                                   \
  do {                                                                                              \
    if (!(cond)) ::flatline::invariant_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)
