// The protocol between the launcher and its ranks (docs/DESIGN.md §8 "Launcher and ranks"): the
// environment a rank process reads, the exit status it leaves with, and the timing of a hang. The
// launcher is cli/launch.cpp (`flatline run`, `flatline score`); a rank is `flatline worker`
// (cli/cmd_worker.cpp -> sim/trainer.cpp), started by that launcher, by torchrun --no-python or by srun.
// The fleet simulator (sim/simulate/) reproduces the same timing. One named constant each.
#pragma once

namespace flatline {

// ---- environment read by a rank ----------------------------------------------------------------
// torchrun's variables (torch/distributed/run.py), which flatline's launcher sets too.
constexpr const char* kEnvRank = "RANK";                        // global rank, 0..world_size-1
constexpr const char* kEnvWorldSize = "WORLD_SIZE";             // ranks in the run
constexpr const char* kEnvLocalRank = "LOCAL_RANK";             // rank on this host
constexpr const char* kEnvLocalWorldSize = "LOCAL_WORLD_SIZE";  // ranks on this host (threads per rank)
constexpr const char* kEnvMasterAddr = "MASTER_ADDR";           // host of rank 0's TCPStore
constexpr const char* kEnvMasterPort = "MASTER_PORT";           // its port
// Slurm's equivalents (srun), read when torchrun's are absent.
constexpr const char* kEnvSlurmRank = "SLURM_PROCID";
constexpr const char* kEnvSlurmWorldSize = "SLURM_NTASKS";
constexpr const char* kEnvSlurmLocalRank = "SLURM_LOCALID";
constexpr const char* kEnvSlurmLocalWorldSize = "SLURM_NTASKS_PER_NODE";
// flatline's own: the run's origin of `t` (epoch seconds; every rank and every restart of a run share
// it), and the intra-op threads per rank (default: cores / local ranks, at least 1).
constexpr const char* kEnvRunT0 = "FLATLINE_RUN_T0";
constexpr const char* kEnvThreads = "FLATLINE_THREADS";
constexpr const char* kDefaultMasterAddr = "127.0.0.1";
constexpr int kDefaultMasterPort = 29500;  // torchrun's default

// ---- exit status of a rank -----------------------------------------------------------------------
constexpr int kExitOk = 0;             // trained to the last step
constexpr int kExitRankError = 2;      // a collective, the file system or a checkpoint failed (RankError)
constexpr int kExitRestart = 3;        // stopped at the scenario's `restart`: start the ranks again with --resume
constexpr int kExitParamMismatch = 4;  // finished, but parameters differed across ranks after some step
constexpr int kExitInvariant = 5;      // a broken invariant (FLATLINE_CHECK, core/check.h): a bug
constexpr int kExitInternal = 6;       // any other unexpected exception: a bug without a check
constexpr int kExitExecFailed = 127;   // the launcher could not exec the worker (the shell's convention)

// ---- joining ---------------------------------------------------------------------------------------
// How long a rank waits for every rank to reach the store (TCPStore's timeout) when the collective
// timeout is shorter: starting a process and connecting on a loaded machine can take seconds, and a
// short collective timeout (a test's, a hang scenario's) must not make the join itself fail.
constexpr double kJoinTimeoutS = 60;

// ---- timing of a hang ----------------------------------------------------------------------------
// A hung rank (faults/run_not_alive.cpp, mode hang) blocks before the all-reduce for the collective
// timeout plus this by default, so its peers' all-reduce times out first and each logs the error.
constexpr double kHangPastTimeoutS = 10;
// After a rank fails, its peers fail within the collective timeout; the launcher kills whoever is left
// this long after that (start-up and checkpoint slack). So a run with a dead or hung rank ends within
// collective_timeout_s + kKillGraceS of the first failure.
constexpr double kKillGraceS = 20;

}  // namespace flatline
