// Detector: a streaming check for one cause of a flat loss (docs/DESIGN.md §2).
// Plain C++ (no torch). A detector sees telemetry records one at a time, in arrival order: records of
// one rank arrive in the order that rank wrote them, but ranks interleave arbitrarily (live tailing).
// Anything a detector decides must therefore depend only on per-rank order, or wait until every rank
// has reported a step, so that live runs and replays give the same finding.
//
// Once a detector fires, its Finding is fixed (sticky). Detectors never throw on odd data (NaN, missing
// fields, repeated steps): they ignore what they cannot use and report it through check().
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "run/causes.h"
#include "telemetry/record.h"

namespace flatline {

struct Finding {
  std::string cause;
  int rank = -1;                  // the rank at fault, where it applies (zero_grad_rank), else -1
  int64_t onset_step = -1;        // estimated first step of the cause
  int64_t detected_step = -1;     // the step of the record that made the detector fire
  double detected_t = std::numeric_limits<double>::quiet_NaN();  // that record's t
  double confidence = 0;          // 0..1
  std::vector<std::string> evidence;  // short lines a person can check
};

enum class CheckState { pending, pass, fail, cannot_run };
const char* to_string(CheckState s);

struct CheckResult {
  std::string cause;
  CheckState state = CheckState::pending;
  std::string detail;  // fail: the headline evidence; cannot_run: "missing <signal>: log <what>"
};

struct DetectorConfig {
  int world_size = 0;             // 0: infer from the ranks seen
  int64_t planned_steps = 0;      // where the run is planned to end, when its log says (HF max_steps,
                                  // Megatron train_iters): a schedule reaching 0 there is on plan; 0 unknown
  bool log_complete = false;      // a recorded log read to its end (diagnose, replay): its last line is the
                                  // run's last word, so what happens only there can be judged as such
};

class Detector {
 public:
  virtual ~Detector() = default;
  virtual const char* cause() const = 0;
  virtual void observe(const Record& r) = 0;
  // The same as observe() on each record in order; a detector may override it with a tighter loop.
  virtual void observe_block(const Record* records, size_t n) {
    for (size_t i = 0; i < n; ++i) observe(records[i]);
  }
  // The stream's clock has reached `now` (run time) with no further record: a live launcher says so
  // every poll, so a detector can judge silence (every rank stopped) on the launcher's clock.
  virtual void advance(double /*now*/) {}
  // End of stream at time t_end (the run ended or the replay reached EOF); liveness is judged against
  // t_end, not against the last record.
  virtual void finish(double /*t_end*/) {}
  virtual std::optional<Finding> finding() const = 0;
  virtual CheckResult check() const = 0;
  // True for a detector that costs about as much as all the others together at fleet scale (per-rank
  // tables that miss the cache): the triage gives it a thread of its own over large blocks.
  virtual bool expensive() const { return false; }
};

// A detector D whose blocks go through its own observe() with no virtual call per record (the triage
// hands over blocks of thousands of records at fleet scale): class D final : public BlockDetector<D>.
template <class D>
class BlockDetector : public Detector {
 public:
  void observe_block(const Record* records, size_t n) final {
    D& self = *static_cast<D*>(this);
    for (size_t i = 0; i < n; ++i) self.D::observe(records[i]);
  }
};

std::unique_ptr<Detector> make_detector(const std::string& cause, const DetectorConfig& cfg);

}  // namespace flatline
