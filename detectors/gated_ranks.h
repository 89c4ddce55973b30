// GatedRanks: what the gated detectors with per-rank arrays (lr_zero, loss_scale_collapse; docs/DESIGN.md
// §2, passes over blocks) keep alike: which ranks have logged a step, the RankGate that commits their
// candidates, and the start of a pass over a block. gated_check(): the verdict check() gives before a
// gated detector's own signal (data_replay's too).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "detectors/detector.h"
#include "detectors/rank_gate.h"
#include "telemetry/block.h"

namespace flatline {

// fail once the gate has committed a finding (its headline evidence), pending before any step record;
// nullopt otherwise (the detector reports its own signal).
inline std::optional<CheckResult> gated_check(const char* cause, const RankGate& gate, bool any_steps) {
  if (auto f = gate.finding()) return CheckResult{cause, CheckState::fail, f->evidence.empty() ? "" : f->evidence.front()};
  if (!any_steps) return CheckResult{cause, CheckState::pending, "no step records yet"};
  return std::nullopt;
}

struct GatedRanks {
  GatedRanks(int world_size, bool exact_positions) : gate(world_size, exact_positions) {}

  std::vector<uint8_t> present;  // per rank: it logged a step (grown by the detector with its own arrays)
  std::vector<int64_t> odd;      // scratch: the rows of a block that take the rules in full
  size_t dense = 0;              // ranks 0..dense-1 are present (a block in lockstep had them)
  RankGate gate;
  bool any_steps = false;

  // The start of a pass over block b: false when it has no rows. A block in lockstep (rank i on row i,
  // n rows) has the detector's per-rank arrays grown to n ranks (grow(n), which grows `present` too),
  // every one of them present, the gate told each steps once, and `odd` sized for it.
  template <class Grow>
  bool start(const StepBlock& b, Grow&& grow) {
    const size_t n = b.rows();
    if (n == 0) return false;
    any_steps = true;
    if (b.lockstep) {
      grow(n);
      if (dense < n) std::fill(present.begin(), present.begin() + static_cast<long>(n), 1), dense = n;
      gate.next_all(static_cast<int>(n));
      odd.resize(n);
    }
    return true;
  }

  // The end of a pass over block b, after start() (and, in lockstep, the detector's vectorised plain-row
  // pass, which flagged `odd_rows` rows in `odd`): full(i, rank, ordinal) takes the rules in full on each
  // flagged row (rank i, at its gate position), or, in a block not in lockstep, on every row with a rank
  // (the detector's arrays grown to it, the rank present, the gate told it stepped); then the gate polls.
  template <class Grow, class Full>
  void finish_pass(const StepBlock& b, size_t odd_rows, Grow&& grow, Full&& full) {
    const size_t n = b.rows();
    if (b.lockstep) {
      for (size_t i = 0; odd_rows && i < n; ++i)
        if (odd[i]) full(i, static_cast<int>(i), gate.position(static_cast<int>(i))), --odd_rows;
    } else {
      for (size_t i = 0; i < n; ++i) {
        const int r = b.rank[i];
        if (r < 0) continue;
        grow(static_cast<size_t>(r) + 1);
        present[static_cast<size_t>(r)] = 1;
        full(i, r, gate.next(r));
      }
    }
    gate.poll();
  }

  std::optional<CheckResult> check(const char* cause) const { return gated_check(cause, gate, any_steps); }
};

}  // namespace flatline
