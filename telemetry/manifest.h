// Manifest: a run's ground truth (run_dir/manifest.json). Written by the launcher, read only by the
// scorer: detectors never see it (docs/DESIGN.md §3). Records the resolved scenario, seed,
// versions, each fault's truth (FaultTruth), and how the run ended.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/input_file.h"

namespace flatline {

// A fault's ground truth (docs/DESIGN.md §5 "Ground truth"): made by the fault (faults/fault.h
// Fault::truth), timed by the OnsetClock (faults/effects.h), written to the manifest and read by the
// scorer. One struct from the fault to the scoreboard.
struct FaultTruth {
  std::string kind, mode;
  int rank = -1;             // target rank, -1 = all
  int64_t active_from = -1;  // first step at which the run differs from its healthy twin
  int64_t onset_step = -1;   // step at which the cause is fully in place
  double onset_t = std::numeric_limits<double>::quiet_NaN();  // run time of onset_step on the target rank
  bool ends_run = false;     // ends the run with an error on every rank by design (a hang): a failed run is
                             // its effect
  std::string cause;         // the cause it injects (a row of run/causes.h): the scorer's truth; empty in an
                             // older manifest (named after the kind: cause_id())
  bool at_resume = false;    // acts only in the resumed processes (its steps are the re-run ones)
  bool onset_at_start = false;  // the onset step never completes as normal (a hang): its onset in run time is
                                // when that step began on the target rank, not when (if ever) it was logged
  const std::string& cause_id() const { return cause.empty() ? kind : cause; }
};

struct Manifest {
  std::string scenario;        // scenario name
  std::string source;          // scenario file
  std::string resolved_yaml;   // the scenario with every default filled in
  uint64_t seed = 0;
  int world_size = 1;
  int64_t steps = 0;
  std::string versions;        // "flatline X; libtorch Y; ..."
  std::vector<FaultTruth> faults;
  bool failure_expected() const;  // some fault ends the run by design
  std::string expect_cause = "healthy";
  int expect_rank = -1;
  int64_t expect_within_steps = 5;
  std::string status = "running";  // running | completed | failed | interrupted (a signal stopped it)
  std::string error;               // first error when failed
  double wall_s = 0;
};

// Atomic: the whole manifest or the previous one. Throws FileWriteError (core/atomic_file.h) naming the
// file and the OS's reason.
void write_manifest(const Manifest& m, const std::string& path);
// A manifest that cannot be taken as one (docs/DESIGN.md §9 "Untrusted input").
class ManifestError : public InputError {
 public:
  using InputError::InputError;
};

// Bounds on what a manifest may say (a 16,384-rank fleet is the largest flatline simulates).
constexpr int kMaxWorldSize = 1 << 20;
constexpr int64_t kMaxSteps = int64_t{1} << 40;

// Reads a manifest as untrusted input: a regular file (core/input_file.h) of at most
// kMaxSmallFileBytes; `scenario` one path component (core/safe_path.h); kinds, causes and modes
// identifiers; world_size, steps and ranks within bounds. Throws InputError (ManifestError for a bad
// field) naming the file and the field.
Manifest read_manifest(const std::string& path);

}  // namespace flatline
