// Subcommands of the `flatline` binary register themselves here, one file each in cli/ (cmd_*.cpp),
// so that a new command is a new file. setup() declares the subcommand's options on `app` and returns
// the function that runs it after parsing (its exit status).
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace flatline {
struct Scenario;
}

namespace flatline::cli {

using Run = std::function<int()>;
using Setup = std::function<Run(CLI::App& sub)>;

struct CommandDef {
  std::string name, help;
  Setup setup;
};

bool register_command(CommandDef def);     // a name registered twice: core/registry.h
std::vector<const CommandDef*> commands();  // by name

// Helpers shared by the commands.
std::string self_exe();
// A scenario file's text (read_scenario_file, faults/scenario_file.h: bounded, regular files only).
std::string read_text_file(const std::string& path);

// `--device cpu|cuda` and `--process-group auto|gloo|nccl`: override the scenarios' placement
// (run, score, worker, step-time). apply() throws ScenarioError for a combination that cannot run.
struct PlacementArgs {
  std::string device, process_group;
  void add(CLI::App& sub);
  bool given() const { return !device.empty() || !process_group.empty(); }
  void apply(Scenario& s) const;
};

// `--trainer CMD`: the script each rank of an external-trainer scenario runs (docs/DESIGN.md §16),
// replacing the command the scenario names, run in the current directory: one suite of scenarios,
// scenarios/external/, scores several training scripts. apply() throws ScenarioError for a scenario of
// flatline's own trainer.
struct TrainerArg {
  std::string command;
  void add(CLI::App& sub);
  void apply(Scenario& s) const;
};

}  // namespace flatline::cli

#define FLATLINE_CONCAT_(a, b) a##b
#define FLATLINE_CONCAT(a, b) FLATLINE_CONCAT_(a, b)
#define FLATLINE_COMMAND(name, help, setup) \
  static const bool FLATLINE_CONCAT(flatline_command_, __LINE__) = ::flatline::cli::register_command({name, help, setup})
