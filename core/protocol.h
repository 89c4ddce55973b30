// The protocol between the launcher and its ranks (docs/DESIGN.md §8 "Launcher and ranks"): the
// environment a rank process reads, the exit status it leaves with, and the timing of a hang. The
// launcher is cli/launch.cpp (`flatline run`, `flatline score`); a rank is `flatline worker`
// (cli/cmd_worker.cpp -> sim/trainer.cpp), started by that launcher, by torchrun --no-python or by srun.
// The fleet simulator (sim/simulate/) reproduces the same timing. One named constant each.
#pragma once
#include <string>
#include <csignal>

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
// An external trainer's ranks (docs/DESIGN.md §16), read by the Python probe (python/flatline_probe):
// the run directory its telemetry goes to, the plan it carries out (faults/plan_json.h), and 1 when the
// launcher started them again to resume (0 on the first start). FLATLINE_SCENARIO instead of
// FLATLINE_PLAN: a scenario file the probe plans itself with `flatline plan` (under another launcher).
constexpr const char* kEnvProbeRunDir = "FLATLINE_RUN_DIR";
constexpr const char* kEnvProbePlan = "FLATLINE_PLAN";
constexpr const char* kEnvProbeResume = "FLATLINE_RESUME";
constexpr const char* kEnvProbeScenario = "FLATLINE_SCENARIO";
// <run dir>/trainer, made by the launcher: where an external trainer writes its own outputs (checkpoints,
// logs, a Trainer's output_dir). It belongs to the run: the next run of the scenario replaces it; any other
// name the script writes at the run directory's top level makes flatline refuse to replace the directory.
constexpr const char* kEnvTrainerDir = "FLATLINE_TRAINER_DIR";
constexpr const char* kTrainerDirName = "trainer";
constexpr const char* kDefaultMasterAddr = "127.0.0.1";
constexpr int kDefaultMasterPort = 29500;  // torchrun's default
// The network interface Gloo binds (torch.distributed's own variable, ProcessGroupGloo
// createDeviceForInterface). Unset: the local address of the route to MASTER_ADDR (core/net.h), so
// ranks on separate hosts are reachable without it and a single host stays on loopback.
constexpr const char* kEnvGlooSocketIfname = "GLOO_SOCKET_IFNAME";

// ---- exit status of a rank -----------------------------------------------------------------------
constexpr int kExitOk = 0;             // trained to the last step
constexpr int kExitRankError = 2;      // a collective, the file system or a checkpoint failed (RankError)
constexpr int kExitRestart = 3;        // stopped at the scenario's `restart`: start the ranks again with --resume
constexpr int kExitParamMismatch = 4;  // finished, but parameters differed across ranks after some step
constexpr int kExitInvariant = 5;      // a broken invariant (FLATLINE_CHECK, core/check.h): a bug
constexpr int kExitInternal = 6;       // any other unexpected exception: a bug without a check
constexpr int kExitExecFailed = 127;   // the launcher could not exec the worker (the shell's convention)
// A RankError's last line says its kind: `rank N failed [comm]: ...`. A collective that failed is most
// often a consequence (a peer died of a full disk, a bad checkpoint, a signal): when several ranks fail,
// the launcher reports a failure of another kind over a [comm] one that it happened to reap first.
constexpr const char* kCommFailureMark = "failed [comm]: ";
// The kind a rank's last words name ("comm", "io", "checkpoint", "device"), "" when they name none.
inline std::string rank_failure_kind(const std::string& words) {
  for (const char* k : {"comm", "io", "checkpoint", "device"})
    if (words.find(std::string("failed [") + k + "]: ") != std::string::npos) return k;
  return "";
}
// Bad input, before any training: a scenario the loader refuses, an environment variable that is not
// what the protocol says (RANK=abc, RANK >= WORLD_SIZE), a usage error on the command line. The same
// status as a RankError: either way this rank cannot go on, and its last line says why.
constexpr int kExitUsage = 2;
// Stopped by a signal (SIGTERM, SIGINT, SIGHUP; the launcher's death arrives as SIGTERM): 128 + the
// signal number, as a shell reports a process killed by it (130 for SIGINT, 143 for SIGTERM). Both a
// worker and the launcher (`flatline run`, `flatline score`) exit so, after flushing what they wrote.
constexpr int kExitSignalBase = 128;

// ---- a checkpoint near each finding (docs/DESIGN.md §8, §14) ------------------------------------------
// When a detector names a cause live, the launcher asks its ranks for a checkpoint at their next step
// boundary, so that `flatline confirm` branches from one near the finding instead of re-training the run
// from its start. The request is this signal to every rank (SIGUSR1: the signal Slurm's --signal and
// Lightning's auto-requeue send to make a job checkpoint), counted by a thread of the rank
// (core/checkpoint_request.h). Ranks see it at different steps, so they agree on it through the
// consistency all-reduce every step already makes (a max: one rank's request is every rank's, as
// Megatron-LM's DistributedSignalHandler all-gathers its signal each iteration), and all write the same
// step. The checkpoint is checkpoints/<kLiveCheckpointPrefix><8 digits>/, never resumed from (a restart
// resumes from the scenario's own checkpoints, so the run stays the run it would have been). At most
// kMaxLiveCheckpoints a run are asked for, and a rank writes no more than that: the extra disk is that
// many checkpoints.
constexpr int kCheckpointRequestSignal = SIGUSR1;
constexpr int kMaxLiveCheckpoints = 3;
constexpr const char* kLiveCheckpointPrefix = "live-step-";

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
// A rank that has written its end (run_end) has done its work; what is left is its
// teardown: a process group's (bounded by the collective timeout), the interpreter's for an external
// trainer (seconds, on a loaded machine). The launcher's watchdogs do not judge it by its silence: it
// waits max(kTeardownMinS, the collective timeout) for every such rank to exit, then kills the rest with
// a warning; their telemetry is complete, so the run is not failed for it.
constexpr double kTeardownMinS = 10;
inline double teardown_grace_s(double collective_timeout_s) {
  return collective_timeout_s > kTeardownMinS ? collective_timeout_s : kTeardownMinS;
}

// ---- signals and the launcher's death ---------------------------------------------------------------
// SIGTERM, SIGINT and SIGHUP to the launcher are forwarded to every rank (as torchrun forwards them to
// its worker group). A rank that receives one writes an `interrupted` event, drains its telemetry and
// exits kExitSignalBase + the signal. The launcher waits this long for them, then SIGKILLs the rest: a
// rank needs milliseconds, and a CI runner or `docker stop` allows 10 s between SIGTERM and SIGKILL
// for the whole job. A second signal to the launcher (a second Ctrl-C) kills every rank at once.
constexpr double kInterruptGraceS = 5;
// A rank started by flatline's launcher gets this signal when the launcher dies, even by SIGKILL
// (prctl PR_SET_PDEATHSIG, set between fork and exec): it then leaves as for a forwarded SIGTERM.
// Ranks started by torchrun or srun rely on those launchers, and on the collective timeout.
constexpr int kParentDeathSignal = SIGTERM;

// ---- the launcher's progress watchdog -------------------------------------------------------------
// Every rank writes a heartbeat each heartbeat_s whatever training does, so a run from which no record
// at all arrives is stopped (a paused host, SIGSTOP, a frozen file system), not merely slow. The
// launcher, on its own clock, ends a run when no rank has written any record for
//   stall_bound_s = max(kStallHeartbeats x heartbeat_s, collective_timeout_s, kStallMinS)
// (ten missed heartbeats, never sooner than the ranks themselves would declare a peer dead, nor than a
// loaded machine may deschedule a process), and before a phase's first record for kJoinTimeoutS +
// stall_bound_s (start-up: loading, joining). The detectors name a silent rank sooner
// (detectors/run_not_alive.cpp: ten heartbeat intervals): the diagnosis comes first, then the stop.
constexpr double kStallHeartbeats = 10;
constexpr double kStallMinS = 5;
inline double stall_bound_s(double heartbeat_s, double collective_timeout_s) {
  double b = heartbeat_s * kStallHeartbeats;
  if (collective_timeout_s > b) b = collective_timeout_s;
  return b > kStallMinS ? b : kStallMinS;
}

// ---- liveness on progress (docs/DESIGN.md §2 "How long a step may take") -------------------------
// Heartbeats say a process lives, step records that it trains. A run can beat and not train: every rank
// blocked reading its data (a stalled file system), a deadlocked loader. How long a step may take is set
// by what the run has shown of its steps, and a first step gets an allowance of its own: loading,
// compiling and the first collectives take long, and a large model's ordinary step takes tens of
// seconds from the start.
//   kFirstStepAllowanceS  the first step after a (re)start may take this long before it is a hang (the
//                         detectors' start-up bound, and the launcher's before a phase's first step);
//   kProgressSteps        once steps are seen, the launcher ends a run in which no rank has written a step
//                         record for max(stall_bound_s, kProgressSteps x the longest of its recent step
//                         intervals): ten typical steps, never sooner than the ranks' own collective
//                         timeout. run_not_alive names the hang first (3 steps + a heartbeat).
//   kCollectiveReportS    ... and never before the ranks' own collective timeout has had this long to
//                         end them: it counts from when a rank entered the collective, after its last
//                         step record, and the rank then writes its error and exits. A rank's own error
//                         ("all-reduce timed out ...") names what happened; the launcher's stop does not.
constexpr double kFirstStepAllowanceS = 120;
constexpr double kProgressSteps = 10;
constexpr double kCollectiveReportS = 2;
inline double progress_bound_s(bool any_step, double longest_step_s, double heartbeat_s, double collective_timeout_s) {
  double stall = stall_bound_s(heartbeat_s, collective_timeout_s);
  if (collective_timeout_s + kCollectiveReportS > stall) stall = collective_timeout_s + kCollectiveReportS;
  if (!any_step) return kFirstStepAllowanceS + stall;
  const double b = kProgressSteps * longest_step_s;
  return b > stall ? b : stall;
}

}  // namespace flatline
