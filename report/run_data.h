// RunData: one recorded run loaded for people to look at (`flatline drill`, `flatline report`): its
// per-rank telemetry, its manifest (ground truth, when there is one) and the Triage's diagnosis of the
// telemetry. The diagnosis is recomputed from the telemetry (not read from diagnosis.json) so that a
// report always matches the detectors of this build. No torch.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "detectors/triage.h"
#include "telemetry/manifest.h"
#include "telemetry/record.h"

namespace flatline {

struct RunData {
  std::string dir;                          // the run directory
  std::string name;                         // manifest scenario name, else the directory name
  std::optional<Manifest> manifest;         // absent when the directory has no manifest.json
  std::vector<std::vector<Record>> ranks;   // records per rank file, in file order (index = rank)
  Diagnosis diagnosis;
  std::vector<std::string> warnings;        // malformed telemetry lines, unreadable manifest
};

// The telemetry files of a run directory: telemetry/*.jsonl, or *.jsonl directly, in rank order
// (rank-2 before rank-10).
std::vector<std::string> telemetry_files(const std::string& dir);

// True when `dir` holds telemetry: telemetry/*.jsonl, or *.jsonl directly.
bool is_run_dir(const std::string& dir);

// `dir` itself when it is a run directory, else its sub-directories that are (sorted by name).
// Throws std::runtime_error when there are none.
std::vector<std::string> find_run_dirs(const std::string& dir);

// Throws std::runtime_error when `dir` has no telemetry.
RunData load_run(const std::string& dir);

// The Triage over per-rank streams, fed rank after rank (as `flatline diagnose` does).
Diagnosis diagnose_ranks(const std::vector<std::vector<Record>>& ranks);

}  // namespace flatline
