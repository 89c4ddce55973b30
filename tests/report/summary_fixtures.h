// Hand-written records for the RunSummary, drill view and checklist-walk tests: a two-rank run with a
// restart, a replayed batch, a stale logger, a zero-gradient rank and a timed-out collective; and a
// 40-rank run in which rank 21 hangs in compute, rank 7 sends zero gradients and rank 13 computes slower.
#pragma once
#include <string>
#include <vector>

#include "report/run_summary.h"

namespace flatline::testing {

inline Record step_rec(int rank, int64_t s, double t, uint64_t hash, double local) {
  Record r;
  r.rank = rank, r.step = s, r.t = t, r.batch_hash = hash, r.local_grad_norm = local, r.lr = 1e-3;
  r.loss_avg = 3.0 - 0.1 * static_cast<double>(s);
  r.step_ms = 100, r.comm_ms = rank == 1 ? 10 : 30;
  return r;
}
inline Record event_rec(int rank, int64_t s, double t, const std::string& name, const std::string& detail = "") {
  Record r;
  r.kind = RecordKind::event, r.rank = rank, r.step = s, r.t = t, r.name = name, r.detail = detail;
  return r;
}
inline Record heartbeat_rec(int rank, int64_t s, double t, const std::string& phase) {
  Record r;
  r.kind = RecordKind::heartbeat, r.rank = rank, r.step = s, r.t = t, r.phase = phase;
  return r;
}

// Rank 0 trains 1..4, restarts from the checkpoint of step 2, re-runs 3 with its batch and trains 4 on
// the batch of step 1 (a replay), then logs step 5 three times while t advances (a stale logger).
// Rank 1's gradient is zero from step 3; it times out in the collective.
inline std::vector<Record> two_rank_records() {
  return {event_rec(0, 0, 0, "run_start"), step_rec(0, 1, 1, 0xa, 1.0), step_rec(1, 1, 1, 0xb, 2.0),
          step_rec(0, 2, 2, 0xc, 1.5), step_rec(1, 2, 2, 0xd, 2.5), event_rec(0, 2, 2.1, "checkpoint_save"),
          step_rec(0, 3, 3, 0xe, 1.2), step_rec(1, 3, 3, 0xf, 0.0), step_rec(0, 4, 4, 0x1, 1.1),
          step_rec(1, 4, 4, 0x2, 0.0), event_rec(0, 4, 4.1, "stop_for_restart"),
          event_rec(0, 2, 9, "resume", "from checkpoint step 2"), step_rec(0, 3, 10, 0xe, 1.0),
          step_rec(0, 4, 11, 0xa, 0.9), step_rec(0, 5, 12, 0x3, 0.8), step_rec(0, 5, 13, 0x4, 0.8),
          step_rec(0, 5, 14, 0x5, 0.8), heartbeat_rec(0, 5, 14.5, "compute"), heartbeat_rec(1, 4, 4.2, "collective"),
          event_rec(1, 4, 30, "error", "Timed out waiting 20000ms"), event_rec(0, 5, 15, "run_end")};
}

inline RunSummary summarise(const std::vector<Record>& records, int world) {
  RunSummary s(world);
  for (const auto& r : records) s.write(r);
  s.end(0);
  return s;
}

// 40 ranks x 100 steps (t = step / 2); rank 7's local grad norm is 0 from step 51; rank 13 waits 5 ms in
// the all-reduce (the others 30: it computes 95 ms, they 70); then every rank's watchdog beats at t = 60
// in step 101, rank 21 in compute, the others in the collective, which times out at t = 80 on all but 21.
inline RunSummary fleet_summary() {
  RunSummary s(40);
  for (int64_t st = 1; st <= 100; ++st)
    for (int r = 0; r < 40; ++r) {
      Record x = step_rec(r, st, 0.5 * static_cast<double>(st), uint64_t(r) << 32 | uint64_t(st),
                          r == 7 && st > 50 ? 0.0 : 1.0 + 0.01 * r);
      x.comm_ms = r == 13 ? 5 : 30;
      s.write(x);
    }
  for (int r = 0; r < 40; ++r) {
    s.write(heartbeat_rec(r, 101, 60, r == 21 ? "compute" : "collective"));
    if (r != 21) s.write(event_rec(r, 100, 80, "error", "Timed out waiting 600000ms for recv operation to complete"));
  }
  s.end(0);
  return s;
}

}  // namespace flatline::testing
