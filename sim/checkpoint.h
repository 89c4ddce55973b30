// A rank's checkpoints (torch; only sim/ includes this; docs/DESIGN.md §8 "A restart", §14 a replay's
// branch point). Layout: <run dir>/checkpoints/step-<8 digits>/rank-<r>.pt, one file per rank (model,
// optimizer, progress counters, sampler, loss scaler, the CPU generator's state), and COMPLETE (the
// step, one line), which rank 0 writes after a barrier once every rank has written its file; only a
// complete checkpoint is ever resumed from. `checkpoints/run_t0` holds the run's origin of t. A
// checkpoint the launcher asked for near a finding (docs/DESIGN.md §8) is written the same way as
// checkpoints/live-step-<8 digits>/ (core/protocol.h kLiveCheckpointPrefix): `flatline confirm` branches
// from it; a resume never starts from it.
// Errors: what cannot be written or read throws RankError of kind checkpoint, naming the file.
#pragma once
#include <cstdint>
#include <string>

#include "faults/effects.h"
#include "sim/dist.h"
#include "sim/models.h"
#include "sim/optimizer.h"
#include "run/sampler.h"
#include "sim/errors.h"

namespace flatline {

// Everything besides model and optimizer that a checkpoint must restore.
struct Progress {
  TrainCounters c;
  SamplerState sampler;
  LoggedStep logged;
  int64_t resumed_from = -1;  // the checkpoint step these processes resumed from; -1: the run's first ones
};

std::string checkpoint_dir(const std::string& run_dir, int64_t step);       // checkpoints/step-N
std::string live_checkpoint_dir(const std::string& run_dir, int64_t step);  // checkpoints/live-step-N

// The newest checkpoint whose every rank finished writing (COMPLETE); -1 when there is none. Only
// step-<digits> directories count: a `step-latest` link or a stray name is not a checkpoint.
int64_t latest_checkpoint(const std::string& run_dir);

// Every rank saves its state of step p.c.step into `dir`; rank 0 marks the checkpoint complete after a
// barrier. A file that cannot be written throws RankError (checkpoint); the barrier throws CommError
// when a peer fails.
void write_checkpoint(const std::string& dir, int rank, Comm& comm, const ModelSpec& spec, TrainModel& model,
                      const Optimizer& opt, const Progress& p);

// The newest complete checkpoint in `run_dir`, loaded for `rank` of `world` ranks: the model and the
// optimizer (tensors onto `dev`) and the progress; the CPU generator's state restored. A checkpoint
// written by another world size: a rank beyond the old ones reads rank 0's file (every rank holds the
// same state), and the sampler is re-sharded (run/sampler.h reshard; `per_rank_batch` = batch_size x
// grad_accum). Throws RankError (checkpoint) naming the checkpoint when there is none (`asked_by`:
// "resume" | "carry_on", for the message), it cannot be read, another model wrote it, or the sampler
// cannot continue at this world size.
struct LoadedCheckpoint {
  Progress progress;
  int64_t step = -1;
  int written_by = 0;  // ranks that wrote it
  std::string dir;
};
LoadedCheckpoint load_latest_checkpoint(const std::string& run_dir, const char* asked_by, int rank, int world,
                                        int per_rank_batch, int64_t train_size, const ModelSpec& spec,
                                        TrainModel& model, Optimizer& opt, at::Device dev);

}  // namespace flatline
