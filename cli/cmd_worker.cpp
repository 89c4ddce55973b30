// `flatline worker SCENARIO --run-dir DIR [--resume] [--device D] [--process-group G]`: one data-parallel
// rank. The environment it reads and the exit status it leaves with are the launcher protocol
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
  std::string scenario, run_dir, formats;
  bool resume = false;
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
  a->placement.add(sub);
  sub.add_option("--formats", a->formats, "also write these foreign-format logs on rank 0 (comma-separated: " +
                                              format_names() + ")");
  return [a] { return run_worker(*a); };
});

}  // namespace
}  // namespace flatline::cli
