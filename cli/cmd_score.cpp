// `flatline score [SCENARIO|DIR ...] [--out DIR] [--json FILE] [--junit FILE]`: runs a suite (files, or
// directories searched for *.yaml; default: the embedded main suite) with a progress line per run,
// then prints the scoreboard. Fleet-only scenarios (`fleet_only: true`) are skipped with a line saying so;
// a scenario beyond the local world-size guard (cli/local_guard.h) stops the suite before it starts, as
// an output path that cannot be written does. A run that failed for a reason other than its fault is a
// harness error (JUnit <error>), never a false alarm of the detectors.
// Exit status: 0 when every scenario's `expect` is met, 1 otherwise or when a report could not be
// written, 2 for bad input (a scenario, an option), 128 + N when signal N interrupted the suite (the
// scoreboard of the runs done so far is still printed and written).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "cli/embedded.h"
#include "cli/launch.h"
#include "cli/local_guard.h"
#include "core/atomic_file.h"
#include "core/interrupt.h"
#include "core/protocol.h"
#include "detectors/score.h"

namespace flatline::cli {
namespace {
namespace fs = std::filesystem;

struct Args {
  std::vector<std::string> inputs;
  std::string out = "runs", json, junit;
  bool oversubscribe = false;
};

struct Input {
  std::string source, text;
};

std::vector<Input> collect(const std::vector<std::string>& args) {
  std::vector<Input> out;
  if (args.empty()) {
    for (const auto& [name, text] : embedded_scenarios()) out.push_back({"<embedded>/" + name, text});
    return out;
  }
  for (const auto& a : args) {
    if (!fs::is_directory(a)) {
      out.push_back({a, read_text_file(a)});
      continue;
    }
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(a))
      if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out.push_back({f, read_text_file(f)});
  }
  return out;
}

int score(const Args& a) {
  // Outputs that cannot be written are refused before the suite runs, not found out after it.
  for (const std::string* path : {&a.json, &a.junit})
    if (!path->empty()) {
      try {
        check_writable_output(*path);
      } catch (const FileWriteError& e) {
        throw ScenarioError(e.what());
      }
    }
  auto ins = collect(a.inputs);
  if (ins.empty()) throw ScenarioError("no scenarios found (*.yaml) in the given files or directories");
  std::vector<Scenario> scenarios;
  std::vector<Input> kept;
  std::map<std::string, std::string> names;  // name -> source: two runs may not share a run directory
  const MachineCapacity here = this_machine();
  int skipped = 0;
  for (auto& in : ins) {
    Scenario s = load_scenario_text(in.text, in.source);  // fail fast
    if (s.fleet_only) {  // for `flatline simulate`: said, not silently dropped
      std::cout << fmt::format("skip {}: fleet-only (world_size {}): flatline simulate {}\n", in.source, s.world_size,
                               in.source);
      ++skipped;
      continue;
    }
    if (const std::string why = local_world_refusal(s, here, a.oversubscribe); !why.empty()) throw ScenarioError(why);
    auto [it, fresh] = names.emplace(s.name, in.source);
    if (!fresh)
      throw ScenarioError(in.source + ": scenario name '" + it->first + "' is also used by " + it->second +
                          " (each run needs its own directory)");
    scenarios.push_back(std::move(s));
    kept.push_back(std::move(in));
  }
  if (kept.empty())
    throw ScenarioError(fmt::format("nothing to run: the {} scenario(s) found are fleet-only (flatline simulate)", skipped));
  install_launcher_signals();  // a signal stops the run in progress and the suite after it
  std::vector<RunScore> runs;
  int interrupted = 0;
  bool write_failed = false;
  for (size_t i = 0; i < kept.size() && !interrupted; ++i) {
    const Scenario& s = scenarios[i];
    std::cout << fmt::format("[{}/{}] {} ({} ranks, {} steps) ... ", i + 1, kept.size(), s.name, s.world_size, s.steps)
              << std::flush;
    LaunchOptions o;
    o.run_dir = a.out + "/" + s.name;
    o.self_exe = self_exe();
    o.live_print = false;
    o.oversubscribe = a.oversubscribe;
    LaunchResult r = launch_run(s, kept[i].text, o);
    runs.push_back(score_run(r.manifest, r.diagnosis));
    const auto& rs = runs.back();
    std::cout << fmt::format("{} -> {} ({:.0f} s)\n", rs.diagnosis.cause,
                             rs.expect_met ? "ok" : rs.harness_error ? "ERROR: " + rs.expect_detail
                                                                     : "EXPECT NOT MET: " + rs.expect_detail,
                             r.manifest.wall_s)
              << std::flush;
    for (const auto& e : r.write_errors) std::cout << "  error: " << e << "\n";
    write_failed = write_failed || !r.write_errors.empty();
    interrupted = r.interrupted_by ? r.interrupted_by : launcher_interrupt();
  }
  if (interrupted)
    std::cout << fmt::format("\ninterrupted by {}: {} of {} scenario(s) not run\n", signal_name(interrupted),
                             kept.size() - runs.size(), kept.size());
  SuiteScore suite = score_suite(runs);
  std::cout << "\n" << render_table(suite) << std::flush;
  auto write = [&](const std::string& path, const std::string& text, const char* what) {
    if (path.empty()) return;
    try {
      write_file_atomic(path, text, what);
    } catch (const FileWriteError& e) {
      std::cerr << "error: " << e.what() << "\n";
      write_failed = true;
    }
  };
  write(a.json, to_json(suite) + "\n", "the scoreboard JSON");
  write(a.junit, to_junit(suite), "the JUnit XML");
  if (interrupted) return kExitSignalBase + interrupted;
  if (write_failed) return 1;
  return suite.expect_failures == 0 ? 0 : 1;
}

FLATLINE_COMMAND("score", "run a suite of scenarios and print the scoreboard", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenarios", a->inputs, "scenario files or directories (default: the embedded main suite)");
  sub.add_option("--out", a->out, "parent directory of the run directories (default runs/)");
  sub.add_option("--json", a->json, "also write the scoreboard as JSON");
  sub.add_option("--junit", a->junit, "also write JUnit XML (harness failures as <error>, missed expectations as <failure>)");
  sub.add_flag("--oversubscribe", a->oversubscribe,
               "more ranks than the local guard allows per core (cli/local_guard.h; memory is still checked)");
  return [a] { return score(*a); };
});

}  // namespace
}  // namespace flatline::cli
