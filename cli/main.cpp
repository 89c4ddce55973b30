// flatline: reproduce a training-loss plateau on demand and score detectors on naming its cause.
//   flatline run SCENARIO.yaml        train world_size ranks, diagnose live, print the diagnosis
//   flatline score [SCENARIO|DIR...]  run a suite (default: the embedded main suite), print the scoreboard
//   flatline diagnose RUN_DIR         diagnose recorded flatline telemetry
//   flatline worker SCENARIO          one rank (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or SLURM_*):
//                                     what `run` starts, and what torchrun --no-python / srun start
//   flatline step-time SCENARIO       median ms per optimizer step of the scenario's model on one rank
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/launch.h"
#include "detectors/score.h"
#include "faults/scenario.h"
#include "sim/trainer.h"

namespace flatline {
const std::vector<std::pair<std::string, std::string>>& embedded_scenarios();
}

namespace {
namespace fs = std::filesystem;
using namespace flatline;

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  buf[n] = 0;
  return buf;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScenarioError(path + ": cannot open scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int env_int(const char* a, const char* b, int dflt) {
  if (const char* v = std::getenv(a)) return std::atoi(v);
  if (b)
    if (const char* v = std::getenv(b)) return std::atoi(v);
  return dflt;
}

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
    if (fs::is_directory(a)) {
      std::vector<std::string> files;
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) out.push_back({f, read_text(f)});
    } else {
      out.push_back({a, read_text(a)});
    }
  }
  return out;
}

int cmd_worker(const std::string& scenario, const std::string& run_dir, bool resume) {
  RankOptions o;
  o.scenario = load_scenario_file(scenario);
  o.run_dir = run_dir;
  o.rank = env_int("RANK", "SLURM_PROCID", 0);
  o.world_size = env_int("WORLD_SIZE", "SLURM_NTASKS", 1);
  o.local_world_size = env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", o.world_size);
  if (const char* a = std::getenv("MASTER_ADDR")) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", nullptr, 29500);
  o.threads = env_int("FLATLINE_THREADS", nullptr, 0);
  if (const char* t = std::getenv("FLATLINE_RUN_T0")) o.run_t0 = std::atof(t);
  o.resume = resume;
  if (o.world_size != o.scenario.world_size)
    std::cerr << fmt::format("note: WORLD_SIZE {} overrides the scenario's world_size {}\n", o.world_size,
                             o.scenario.world_size);
  o.scenario.world_size = o.world_size;
  try {
    RankResult r = train_rank(o);
    std::cerr << fmt::format("rank {}: {} at step {}, {} optimizer steps, {} parameter mismatches across ranks\n",
                             o.rank, r.stopped_for_restart ? "stopped for restart" : "finished", r.last_step,
                             r.opt_steps, r.param_mismatches);
    if (r.param_mismatches > 0) return 4;
    return r.stopped_for_restart ? 3 : 0;
  } catch (const RankError& e) {
    std::cerr << "rank " << o.rank << " failed: " << e.what() << "\n";
    return 2;
  }
}

LaunchResult run_one(const Input& in, const std::string& out_dir, bool live) {
  Scenario s = load_scenario_text(in.text, in.source);
  LaunchOptions o;
  o.run_dir = out_dir + "/" + s.name;
  o.self_exe = self_exe();
  o.live_print = live;
  return launch_run(s, in.text, o);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flatline: reproduce a training-loss plateau on demand and score detectors on naming its cause"};
  app.require_subcommand(1);

  std::string scenario, run_dir, out_dir = "runs", json_out, junit_out;
  bool resume = false;
  std::vector<std::string> inputs;
  int steps = 10, threads = 1;

  auto* run = app.add_subcommand("run", "train a scenario's ranks, diagnose live, print the diagnosis");
  run->add_option("scenario", scenario, "scenario YAML file")->required();
  run->add_option("--out", out_dir, "parent directory of the run directory (default runs/)");

  auto* score = app.add_subcommand("score", "run a suite of scenarios and print the scoreboard");
  score->add_option("scenarios", inputs, "scenario files or directories (default: the embedded main suite)");
  score->add_option("--out", out_dir, "parent directory of the run directories (default runs/)");
  score->add_option("--json", json_out, "also write the scoreboard as JSON");
  score->add_option("--junit", junit_out, "also write JUnit XML");

  auto* diag = app.add_subcommand("diagnose", "diagnose recorded flatline telemetry (a run directory)");
  diag->add_option("run_dir", run_dir, "run directory or directory of rank-*.jsonl")->required();

  auto* worker = app.add_subcommand("worker", "one rank; reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or SLURM_*)");
  worker->add_option("scenario", scenario, "scenario YAML file")->required();
  worker->add_option("--run-dir", run_dir, "run directory")->required();
  worker->add_flag("--resume", resume, "resume from the latest checkpoint in the run directory");

  auto* st = app.add_subcommand("step-time", "median ms per optimizer step of the scenario's model, one rank");
  st->add_option("scenario", scenario)->required();
  st->add_option("--steps", steps);
  st->add_option("--threads", threads);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*worker) return cmd_worker(scenario, run_dir, resume);
    if (*run) {
      Input in{scenario, read_text(scenario)};
      Scenario s = load_scenario_text(in.text, in.source);
      std::cout << fmt::format("flatline run {}: {} ranks, {} steps ({} on {})\n", s.name, s.world_size, s.steps,
                               s.model.kind, s.data.kind)
                << std::flush;
      LaunchResult r = run_one(in, out_dir, true);
      std::cout << to_text(r.diagnosis);
      RunScore sc = score_run(r.manifest, r.diagnosis);
      std::cout << fmt::format("\nrun directory: {}/{}\nground truth: {}{}; verdict: {}\n", out_dir, s.name,
                               sc.truth_cause, sc.truth_rank >= 0 ? fmt::format(" (rank {})", sc.truth_rank) : "",
                               sc.correct ? "correct" : (sc.false_alarm ? "FALSE ALARM" : "MISSED"));
      if (!r.first_error.empty()) std::cout << "run ended with an error: " << r.first_error;
      return sc.expect_met ? 0 : 1;
    }
    if (*score) {
      auto ins = collect(inputs);
      std::vector<RunScore> runs;
      for (size_t i = 0; i < ins.size(); ++i) {
        Scenario s = load_scenario_text(ins[i].text, ins[i].source);  // fail fast on a bad file
        std::cout << fmt::format("[{}/{}] {} ({} ranks, {} steps) ... ", i + 1, ins.size(), s.name, s.world_size,
                                 s.steps)
                  << std::flush;
        LaunchResult r = run_one(ins[i], out_dir, false);
        runs.push_back(score_run(r.manifest, r.diagnosis));
        const auto& rs = runs.back();
        std::cout << fmt::format("{} -> {} ({:.0f} s)\n", rs.diagnosis.cause,
                                 rs.expect_met ? "ok" : "EXPECT NOT MET: " + rs.expect_detail, r.manifest.wall_s)
                  << std::flush;
      }
      SuiteScore suite = score_suite(runs);
      std::cout << "\n" << render_table(suite);
      if (!json_out.empty()) std::ofstream(json_out) << to_json(suite) << "\n";
      if (!junit_out.empty()) std::ofstream(junit_out) << to_junit(suite);
      return suite.expect_failures == 0 ? 0 : 1;
    }
    if (*diag) {
      std::vector<std::string> warnings;
      Diagnosis d = diagnose_run_dir(run_dir, 0, &warnings);
      for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
      std::cout << to_text(d);
      return 0;
    }
    if (*st) {
      Scenario s = load_scenario_file(scenario);
      std::cout << fmt::format("{}: {:.1f} ms/step (median of {}, {} threads)\n", s.name,
                               measure_step_ms(s, steps, threads), steps, threads);
      return 0;
    }
  } catch (const ScenarioError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
