// A scenario file (docs/DESIGN.md §4): read, checked and written. Loading is strict: an unknown key, a
// duplicate key, a wrong type, an out-of-range value, a fault kind, mode or parameter the fault registry
// (faults/fault.h) does not declare, an expectation that is not a row of the cause table (run/causes.h)
// — each is a ScenarioError naming the file, line and column and what was expected. The structs and
// their defaults: run/scenario.h.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "run/scenario.h"

namespace flatline {

// The keys a scenario may have at its top level, in the order of docs/DESIGN.md §4's table.
const std::vector<std::string>& scenario_keys();

// A scenario file's text. A scenario is a small regular file: a directory, a device, a FIFO (each said
// to be one) and anything over kMaxScenarioBytes are refused with a ScenarioError naming the path, not
// read until memory runs out (/dev/urandom).
constexpr size_t kMaxScenarioBytes = 1 << 20;
std::string read_scenario_file(const std::string& path);

Scenario load_scenario_file(const std::string& path);
// `source` names the text in error messages (a file path, or "<embedded:main/x.yaml>").
Scenario load_scenario_text(const std::string& yaml, const std::string& source);

// Sets the placement (device, and process_group unless empty), as `--device` / `--process-group`
// do; throws ScenarioError naming `source` for a combination that cannot run (nccl or the flatline
// kernels on cpu... ). The loader checks a scenario's own keys the same way.
void set_placement(Scenario& s, const std::string& device, const std::string& process_group,
                   const std::string& source);

// Serialises the resolved scenario (all defaults filled) as YAML, for the run's manifest.
std::string to_yaml(const Scenario& s);

}  // namespace flatline
