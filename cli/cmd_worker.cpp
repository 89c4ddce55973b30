// `flatline worker SCENARIO --run-dir DIR [--resume] [--device D] [--process-group G]`: one data-parallel
// rank. A replay of `flatline confirm` (docs/DESIGN.md §14) adds [--carry-on] [--stop-after N]
// [--checkpoint-at-stop] [--eval-from S] [--repair FILE]. The environment it reads and the exit status it leaves with are the launcher protocol
// (core/protocol.h): torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (or Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE), FLATLINE_THREADS,
// FLATLINE_RUN_T0; 0 done, 2 a RankError (a collective, the file system or a checkpoint failed), 3 stopped
// for the scenario's restart, 4 parameters diverged across ranks, 5 a broken invariant, 6 any other
// internal error.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "cli/command.h"
#include "confirm/intervention.h"
#include "core/check.h"
#include "core/protocol.h"
#include "sim/trainer.h"
#include "telemetry/writers/writer.h"

namespace flatline::cli {
namespace {

int env_int(const char* a, const char* b, int dflt) {
  if (const char* v = std::getenv(a)) return std::atoi(v);
  if (b)
    if (const char* v = std::getenv(b)) return std::atoi(v);
  return dflt;
}

struct Args {
  std::string scenario, run_dir, formats, repair;
  bool resume = false, carry_on = false, checkpoint_at_stop = false;
  int64_t stop_after = -1, eval_from = -1;
  PlacementArgs placement;
};

int run_worker(const Args& a) {
  RankOptions o;
  o.scenario = load_scenario_file(a.scenario);
  a.placement.apply(o.scenario);
  o.run_dir = a.run_dir;
  o.rank = env_int(kEnvRank, kEnvSlurmRank, 0);
  o.world_size = env_int(kEnvWorldSize, kEnvSlurmWorldSize, 1);
  o.local_world_size = env_int(kEnvLocalWorldSize, kEnvSlurmLocalWorldSize, o.world_size);
  o.local_rank = env_int(kEnvLocalRank, kEnvSlurmLocalRank, -1);
  if (const char* addr = std::getenv(kEnvMasterAddr)) o.master_addr = addr;
  o.master_port = env_int(kEnvMasterPort, nullptr, kDefaultMasterPort);
  o.threads = env_int(kEnvThreads, nullptr, 0);
  if (const char* t = std::getenv(kEnvRunT0)) o.run_t0 = std::atof(t);
  o.resume = a.resume;
  o.carry_on = a.carry_on && !a.resume;  // a replay that stopped for its restart resumes like the run
  o.stop_after = a.stop_after;
  o.checkpoint_at_stop = a.checkpoint_at_stop;
  o.eval_from = a.eval_from;
  if (!a.repair.empty()) {  // what the replay runs, like its scenario: a bad one is refused before training
    try {
      o.repair = make_intervention(repair_from_json(read_text_file(a.repair), a.repair), o.scenario);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(a.repair + ": " + e.what());
    } catch (const std::runtime_error& e) {
      throw ScenarioError(e.what());
    }
  }
  // --formats adds to the scenario's own foreign-format logs (rank 0 writes them)
  for (size_t p = 0; p < a.formats.size();) {
    size_t q = a.formats.find(',', p);
    if (q == std::string::npos) q = a.formats.size();
    const std::string f = a.formats.substr(p, q - p);
    if (!f.empty() && std::find(o.scenario.formats.begin(), o.scenario.formats.end(), f) == o.scenario.formats.end()) {
      if (!is_format_name(f)) throw ScenarioError("--formats: unknown format '" + f + "' (expected " + format_names() + ")");
      o.scenario.formats.push_back(f);
    }
    p = q + 1;
  }
  if (o.world_size != o.scenario.world_size)
    std::cerr << fmt::format("note: {} {} overrides the scenario's world_size {}\n", kEnvWorldSize, o.world_size,
                             o.scenario.world_size);
  o.scenario.world_size = o.world_size;
  try {
    RankResult r = train_rank(o);
    std::cerr << fmt::format("rank {}: {} at step {}, {} optimizer steps, {} parameter mismatches across ranks\n",
                             o.rank, r.stopped_for_restart ? "stopped for restart" : "finished", r.last_step,
                             r.opt_steps, r.param_mismatches);
    if (r.param_mismatches > 0) return kExitParamMismatch;
    return r.stopped_for_restart ? kExitRestart : kExitOk;
  } catch (const RankError& e) {
    std::cerr << "rank " << o.rank << " failed: " << e.what() << "\n";
    return kExitRankError;
  } catch (const ScenarioError&) {  // the scenario does not fit this rank's data: main() says so, exits 2
    throw;
  } catch (const InvariantError& e) {
    std::cerr << "rank " << o.rank << ": " << e.what() << "\n";
    return kExitInvariant;
  } catch (const std::exception& e) {
    std::cerr << "rank " << o.rank << ": internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}

FLATLINE_COMMAND("worker", "one rank; reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or SLURM_*)", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("scenario", a->scenario, "scenario YAML file")->required();
  sub.add_option("--run-dir", a->run_dir, "run directory")->required();
  sub.add_flag("--resume", a->resume, "resume from the latest checkpoint in the run directory");
  sub.add_flag("--carry-on", a->carry_on,
               "a replay: start from the latest checkpoint as the processes that wrote it going on (not a resume)");
  sub.add_option("--stop-after", a->stop_after, "a replay: train no further than this step")->check(CLI::PositiveNumber);
  sub.add_flag("--checkpoint-at-stop", a->checkpoint_at_stop, "a replay: write a checkpoint after the last step trained");
  sub.add_option("--eval-from", a->eval_from, "a replay: also evaluate the held-out loss after every step from this one")
      ->check(CLI::PositiveNumber);
  sub.add_option("--repair", a->repair, "a replay: the repair to make (a JSON RepairSpec, confirm/intervention.h)");
  a->placement.add(sub);
  sub.add_option("--formats", a->formats, "also write these foreign-format logs on rank 0 (comma-separated: " +
                                              format_names() + ")");
  return [a] { return run_worker(*a); };
});

}  // namespace
}  // namespace flatline::cli
