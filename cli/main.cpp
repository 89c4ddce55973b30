// flatline: reproduce a training-loss plateau on demand and score detectors on naming its cause.
// Each subcommand lives in its own file (cli/cmd_*.cpp) and registers itself (cli/command.h):
//   flatline run SCENARIO.yaml        train world_size ranks, diagnose live, print the diagnosis
//   flatline score [SCENARIO|DIR...]  run a suite (default: the embedded main suite), print the scoreboard
//   flatline diagnose RUN_DIR         diagnose recorded flatline telemetry
//   flatline worker SCENARIO          one rank (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or SLURM_*):
//                                     what `run` starts, and what torchrun --no-python / srun start
//   flatline step-time SCENARIO       median ms per optimizer step of the scenario's model on one rank
// `flatline --version` prints the version; a usage error (an unknown option, a missing argument) exits 2.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/command.h"
#include "core/registry.h"
#include "core/printable.h"
#include "faults/scenario_file.h"
#include "sim/build_info.h"

namespace flatline::cli {

namespace {
Registry<CommandDef>& registry() {
  static Registry<CommandDef> r("subcommand");
  return r;
}
}  // namespace

bool register_command(CommandDef def) {
  const std::string name = def.name;
  registry().add(name, std::move(def));
  return true;
}
std::vector<const CommandDef*> commands() {
  std::vector<const CommandDef*> out;
  for (const auto& [name, c] : registry()) out.push_back(&c);
  return out;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  buf[n] = 0;
  return buf;
}

void PlacementArgs::add(CLI::App& sub) {
  sub.add_option("--device", device, "train on cpu or cuda (cuda:LOCAL_RANK per rank), whatever the scenario says")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub.add_option("--process-group", process_group,
                 "auto (NCCL on cuda, Gloo on cpu) | gloo (ranks may share a GPU) | nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
}

void PlacementArgs::apply(Scenario& s) const {
  if (given()) set_placement(s, device.empty() ? s.device : device, process_group, "--device/--process-group");
}

void TrainerArg::add(CLI::App& sub) {
  sub.add_option("--trainer", command,
                 "the command each rank of an external-trainer scenario runs instead of the one it names "
                 "(in the current directory)");
}

void TrainerArg::apply(Scenario& s) const {
  if (command.empty()) return;
  if (s.trainer.command.empty())
    throw ScenarioError(fmt::format("{}: --trainer replaces the command of a scenario with an external 'trainer', "
                                    "and scenario {} trains flatline's own model (scenarios/external/ have one)",
                                    s.source, s.name));
  s.trainer.command = command;
  s.trainer.cwd = std::filesystem::current_path().string();
}

std::string read_text_file(const std::string& path) { return read_scenario_file(path); }

}  // namespace flatline::cli

int main(int argc, char** argv) {
  CLI::App app{"flatline: reproduce a training-loss plateau on demand and score detectors on naming its cause"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    return fmt::format("flatline {}\n{}\ndevices: {}", FLATLINE_VERSION, flatline::build_info(), flatline::devices_info());
  });
  std::vector<std::pair<CLI::App*, flatline::cli::Run>> runs;
  for (const flatline::cli::CommandDef* d : flatline::cli::commands()) {  // by name
    CLI::App* sub = app.add_subcommand(d->name, d->help);
    runs.emplace_back(sub, d->setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and the usage hint
    return 2;     // a usage error, as POSIX utilities exit (CLI11's own codes start at 100)
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const flatline::ScenarioError& e) {
    std::cerr << "error: " << flatline::printable(e.what()) << "\n";
    return 2;
  } catch (const std::bad_alloc&) {  // a bound this input got past: said, never a crash
    std::cerr << "error: out of memory reading the input (a file far larger than a run's)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << flatline::printable(e.what()) << "\n";
    return 1;
  }
  return 0;
}
