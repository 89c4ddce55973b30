// RunData: one recorded run loaded for people to look at (`flatline drill`, `flatline report`): its
// per-rank telemetry, its manifest (ground truth, when there is one) and the Triage's diagnosis of the
// telemetry. The diagnosis is recomputed from the telemetry (not read from diagnosis.json) so that a
// report always matches the detectors of this build. No torch.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "confirm/confirm.h"
#include "detectors/triage.h"
#include "telemetry/manifest.h"
#include "telemetry/record.h"

namespace flatline {

// A confirmation of a run's diagnosis (`flatline confirm`, docs/DESIGN.md §14): its verdict and rank
// 0's records of its replays, for the report's loss curves.
struct ConfirmationData {
  ConfirmResult result;
  std::string dir;                                 // where its replays are
  std::vector<Record> prefix, control, repaired;   // rank 0's records of each replay (file order)
  int64_t samples_per_step = 0;  // the scenario's batch_size * grad_accum: a record's trained step (a frozen
                                 // logger repeats its logged step); 0: the logged step
};

struct RunData {
  std::string dir;                          // the run directory
  std::string name;                         // manifest scenario name, else the directory name
  std::optional<Manifest> manifest;         // absent when the directory has no manifest.json
  std::vector<std::vector<Record>> ranks;   // records per rank file, in file order (index = rank)
  Diagnosis diagnosis;
  std::optional<ConfirmationData> confirmation;  // dir/confirm/confirm.json, when the run was confirmed
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

// Throws std::runtime_error when `dir` has no telemetry. A confirmation in dir/confirm is attached
// (an unreadable one is a warning).
RunData load_run(const std::string& dir);
// Attaches the confirmation whose confirm.json and replays are in `confirm_dir`; throws
// std::runtime_error for a confirm.json it cannot read.
void attach_confirmation(RunData& run, const std::string& confirm_dir);

// The Triage over per-rank streams, fed rank after rank (as `flatline diagnose` does).
Diagnosis diagnose_ranks(const std::vector<std::vector<Record>>& ranks);

}  // namespace flatline
