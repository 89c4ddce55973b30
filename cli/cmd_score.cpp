// `flatline score [SCENARIO|DIR ...] [--out DIR] [--json FILE] [--junit FILE]`: runs a suite (files, or
// directories searched for *.yaml; default: the embedded main suite) with a progress line per run,
// then prints the scoreboard. Exit status: 0 when every scenario's `expect` is met, 1 otherwise.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "cli/embedded.h"
#include "cli/launch.h"
#include "detectors/score.h"

namespace flatline::cli {
namespace {
namespace fs = std::filesystem;

struct Args {
  std::vector<std::string> inputs;
  std::string out = "runs", json, junit;
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
  auto ins = collect(a.inputs);
  if (ins.empty()) throw ScenarioError("no scenarios found (*.yaml) in the given files or directories");
  std::vector<Scenario> scenarios;
  std::map<std::string, std::string> names;  // name -> source: two runs may not share a run directory
  std::vector<Input> kept;
  for (const auto& in : ins) {
    Scenario s = load_scenario_text(in.text, in.source);  // fail fast
    if (s.fleet_only) {  // thousands of ranks: not for local workers
      std::cout << fmt::format("skipped {}: fleet_only (run it with `flatline simulate`)\n", in.source);
      continue;
    }
    kept.push_back(in);
    scenarios.push_back(std::move(s));
    auto [it, fresh] = names.emplace(scenarios.back().name, in.source);
    if (!fresh)
      throw ScenarioError(in.source + ": scenario name '" + it->first + "' is also used by " + it->second +
                          " (each run needs its own directory)");
  }
  ins = std::move(kept);
  if (ins.empty()) throw ScenarioError("every scenario given is fleet_only: run them with `flatline simulate`");
  std::vector<RunScore> runs;
  for (size_t i = 0; i < ins.size(); ++i) {
    const Scenario& s = scenarios[i];
    std::cout << fmt::format("[{}/{}] {} ({} ranks, {} steps) ... ", i + 1, ins.size(), s.name, s.world_size,
                             s.steps)
              << std::flush;
    LaunchOptions o;
    o.run_dir = a.out + "/" + s.name;
    o.self_exe = self_exe();
    o.live_print = false;
    LaunchResult r = launch_run(s, ins[i].text, o);
    runs.push_back(score_run(r.manifest, r.diagnosis));
    const auto& rs = runs.back();
    std::cout << fmt::format("{} -> {} ({:.0f} s)\n", rs.diagnosis.cause,
                             rs.expect_met ? "ok" : "EXPECT NOT MET: " + rs.expect_detail, r.manifest.wall_s)
              << std::flush;
  }
  SuiteScore suite = score_suite(runs);
  std::cout << "\n" << render_table(suite);
  if (!a.json.empty()) std::ofstream(a.json) << to_json(suite) << "\n";
  if (!a.junit.empty()) std::ofstream(a.junit) << to_junit(suite);
  return suite.expect_failures == 0 ? 0 : 1;
}

FLATLINE_COMMAND("score", "run a suite of scenarios and print the scoreboard", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenarios", a->inputs, "scenario files or directories (default: the embedded main suite)");
  sub.add_option("--out", a->out, "parent directory of the run directories (default runs/)");
  sub.add_option("--json", a->json, "also write the scoreboard as JSON");
  sub.add_option("--junit", a->junit, "also write JUnit XML");
  return [a] { return score(*a); };
});

}  // namespace
}  // namespace flatline::cli
