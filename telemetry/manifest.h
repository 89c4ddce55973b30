// Manifest: a run's ground truth (run_dir/manifest.json). Written by the launcher, read only by the
// scorer: detectors never see it (docs/DESIGN.md §3). Records the resolved scenario, seed,
// versions, each fault's kind, target rank, active_from and onset_step, and how the run ended.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/input_file.h"

namespace flatline {

struct ManifestFault {
  std::string kind, mode;
  int rank = -1;             // target rank, -1 = all
  int64_t active_from = -1;  // first step that differs from the healthy twin
  int64_t onset_step = -1;   // step at which the cause is fully in place
  double onset_t = std::numeric_limits<double>::quiet_NaN();  // run time of onset_step on the target
  bool ends_run = false;     // the fault ends the run with an error by design (a hang): a failed run is its effect
  std::string cause;         // the cause it injects (docs/DESIGN.md §2); empty in an older manifest
  const std::string& cause_id() const { return cause.empty() ? kind : cause; }  // empty: named after it
};

struct Manifest {
  std::string scenario;        // scenario name
  std::string source;          // scenario file
  std::string resolved_yaml;   // the scenario with every default filled in
  uint64_t seed = 0;
  int world_size = 1;
  int64_t steps = 0;
  std::string versions;        // "flatline X; libtorch Y; ..."
  std::vector<ManifestFault> faults;
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
