// `flatline drill [--seed K] [--from DIR] [--answers FILE]`: practise the flat-loss checklist on a hidden
// recorded run (report/drill.h). Runs come from DIR (default runs/, what `flatline score` writes): a
// run directory, or a directory of them, each with telemetry and manifest.json; the seed picks one.
// The drill does not train: with no recorded runs it says how to record some. Commands come from the
// terminal, or one per line from --answers FILE or a non-terminal stdin (scripted mode, echoed).
// Exit status: 0 for a right answer, 1 for a wrong or missing one, 2 when there is no run to drill (or
// the picked run's manifest, its hidden truth, cannot be read: never taken as "healthy").
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "cli/command.h"
#include "report/drill.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string from = "runs", answers;
  int64_t seed = -1;
};

int drill(const Args& a) {
  std::vector<std::string> dirs;
  try {
    for (const auto& d : find_run_dirs(a.from))
      if (std::filesystem::exists(d + "/manifest.json")) dirs.push_back(d);
  } catch (const std::exception& e) {
    std::cerr << "flatline drill: " << e.what() << "\n";
  }
  if (dirs.empty()) {
    std::cerr << fmt::format("flatline drill: no recorded runs with a manifest.json in {}.\nRecord some first:\n"
                             "  flatline score --out runs              # the embedded suite, then\n"
                             "  flatline drill --from runs\n", a.from);
    return 2;
  }
  const uint64_t seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}() % 100000;
  const size_t pick = drill_pick(dirs.size(), seed);
  std::cout << fmt::format("seed {} (replay this drill with --seed {}), run {} of {}\n", seed, seed, pick + 1,
                           dirs.size());
  RunData run = load_run(dirs[pick]);
  if (!run.manifest) {  // the answer is the manifest's truth: without it the drill would score against "healthy"
    std::string why = "cannot read it";
    for (const auto& w : run.warnings)
      if (w.find("manifest") != std::string::npos) why = w;
    std::cerr << fmt::format("flatline drill: {}/manifest.json holds the run's hidden truth, and {}: record the run "
                             "again (flatline score --out {})\n",
                             dirs[pick], why, a.from);
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  Drill d(std::move(run), [t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  if (!a.answers.empty()) {
    std::ifstream in(a.answers);
    if (!in) {
      std::cerr << "flatline drill: cannot read " << a.answers << "\n";
      return 2;
    }
    return run_drill(d, in, std::cout, true);
  }
  return run_drill(d, std::cin, std::cout, !isatty(STDIN_FILENO));
}

FLATLINE_COMMAND("drill", "practise the flat-loss checklist on a hidden recorded run", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("--seed", a->seed, "picks the run (default: random, printed)");
  sub.add_option("--from", a->from, "a run directory or a directory of runs (default runs/)");
  sub.add_option("--answers", a->answers, "scripted mode: one command per line");
  return [a] { return drill(*a); };
});

}  // namespace
}  // namespace flatline::cli
