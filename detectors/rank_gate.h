// RankGate: makes a finding independent of how ranks interleave (detector.h).
// Each rank judges its own records and offers a candidate Finding tagged with a per-rank position:
// the ordinal of its step records (k-th step record of that rank; ranks of a data-parallel run write
// one per optimizer step, so the k-th records of all ranks are the same step, restarts included) or
// its wall clock t. The gate commits the smallest candidate (position, rank) only once every
// expected rank has reached that position, so no rank can still offer an earlier one. Expected
// ranks: 0..world_size-1 when the config gives world_size, else the ranks seen so far (a rank that
// has not written anything yet cannot be waited for: pass world_size when whole files may arrive
// one after another). finish() commits whatever is pending (the stream has ended).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "detectors/detector.h"

namespace flatline {

class RankGate {
 public:
  // exact_positions: true for ordinals (a candidate is offered while its rank's position is
  // advanced to it, so reaching the position means the rank has nothing earlier left to say);
  // false for wall clock (a rank may still write more records at the same t).
  RankGate(int world_size, bool exact_positions) : world_(world_size), exact_(exact_positions) {}

  void see(int rank) {
    if (rank < 0) return;
    const size_t i = static_cast<size_t>(rank);
    if (i >= pos_.size()) {
      pos_.resize(i + 1, -std::numeric_limits<double>::infinity());
      seen_.resize(i + 1, 0);
    }
    seen_[i] = 1;
  }
  void advance(int rank, double pos) {
    if (rank < 0 || !std::isfinite(pos)) return;
    see(rank);
    double& p = pos_[static_cast<size_t>(rank)];
    p = std::max(p, pos);
  }
  // Exact positions that the gate counts itself: rank's next ordinal (its k-th step record is k).
  double next(int rank) {
    see(rank);
    double& p = pos_[static_cast<size_t>(rank)];
    p = p < 1 ? 1 : p + 1;
    return p;
  }
  // The same for ranks 0..n-1 at once, each one step record further (a block in lockstep).
  void next_all(int n) {
    see_all(n);
    double* p = pos_.data();
    for (int r = 0; r < n; ++r) p[r] = p[r] < 1 ? 1 : p[r] + 1;
  }
  // Ranks 0..n-1 seen (a block in lockstep has them all); then advance_seen() for them.
  void see_all(int n) {
    if (n <= seen_upto_) return;
    see(n - 1);
    for (int r = 0; r < n; ++r) seen_[static_cast<size_t>(r)] = 1;
    seen_upto_ = n;
  }
  // advance() for a rank already seen, at a finite position.
  void advance_seen(int rank, double pos) {
    double& p = pos_[static_cast<size_t>(rank)];
    p = p < pos ? pos : p;
  }
  // advance_seen(r, pos[r]) for ranks from..to-1, already seen, at finite positions (a block's rows).
  void advance_rows(const double* pos, size_t from, size_t to) {
    double* p = pos_.data();
    for (size_t r = from; r < to; ++r) p[r] = p[r] < pos[r] ? pos[r] : p[r];
  }
  // The positions of ranks 0..n-1 (seen), for a pass over a block that moves them itself, only up (as
  // advance_rows does).
  double* positions() { return pos_.data(); }
  double position(int rank) const {
    const size_t i = static_cast<size_t>(rank);
    return rank < 0 || i >= pos_.size() ? -std::numeric_limits<double>::infinity() : pos_[i];
  }
  void offer(int rank, double pos, Finding f) {
    if (committed_) return;
    if (!std::isfinite(pos)) pos = position(rank);
    if (!cand_ || pos < cand_pos_ || (pos == cand_pos_ && rank < cand_rank_)) {
      cand_ = std::move(f);
      cand_pos_ = pos;
      cand_rank_ = rank;
      scan_from_ = 0;
    }
  }
  bool has_candidate() const { return cand_.has_value() && !committed_; }
  // Whether offer(rank, pos, ...) would take a candidate (pos finite): a caller can skip building one.
  bool would_take(int rank, double pos) const {
    return !committed_ && (!cand_ || pos < cand_pos_ || (pos == cand_pos_ && rank < cand_rank_));
  }
  const std::optional<Finding>& candidate() const { return cand_; }
  int candidate_rank() const { return cand_rank_; }
  double candidate_position() const { return cand_pos_; }

  // Commits the candidate once every expected rank has passed it. Returns true on commit.
  // Positions only grow, so ranks below scan_from_ have passed the current candidate for good.
  bool poll() {
    if (committed_ || !cand_) return false;
    const int n = std::max(world_, static_cast<int>(pos_.size()));
    bool contiguous = true;  // every rank below r has passed (an unseen rank may still come)
    for (int r = scan_from_; r < n; ++r) {
      if (r != cand_rank_) {
        if (world_ <= 0 && !(static_cast<size_t>(r) < seen_.size() && seen_[static_cast<size_t>(r)])) {
          contiguous = false;  // inferred world: only ranks seen
          continue;
        }
        const double p = position(r);
        const bool passed = p > cand_pos_ || (p == cand_pos_ && (exact_ || r > cand_rank_));
        if (!passed) return false;
      }
      if (contiguous) scan_from_ = r + 1;
    }
    committed_ = true;
    return true;
  }
  bool flush() {
    if (committed_ || !cand_) return false;
    committed_ = true;
    return true;
  }
  bool committed() const { return committed_; }
  std::optional<Finding> finding() const { return committed_ ? cand_ : std::nullopt; }
  // Ranks that the pending candidate still waits for (for check() details).
  int waiting_for() const {
    int w = 0;
    const int n = std::max(world_, static_cast<int>(pos_.size()));
    for (int r = 0; r < n; ++r)
      if (r != cand_rank_ && position(r) < cand_pos_) ++w;
    return w;
  }

 private:
  int world_;
  bool exact_;
  std::vector<double> pos_;  // by rank; -inf until the rank's first record
  std::vector<char> seen_;
  int scan_from_ = 0, seen_upto_ = 0;
  std::optional<Finding> cand_;
  double cand_pos_ = 0;
  int cand_rank_ = -1;
  bool committed_ = false;
};

}  // namespace flatline
