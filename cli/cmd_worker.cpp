// `flatline worker SCENARIO --run-dir DIR [--resume] [--device D] [--process-group G]`: one data-parallel
// rank. A replay of `flatline confirm` (docs/DESIGN.md §14) adds [--carry-on] [--stop-after N]
// [--checkpoint-at-stop] [--eval-from S] [--repair FILE]. The environment it reads and the exit status it leaves with are the launcher protocol
// (core/protocol.h): torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (or Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE), FLATLINE_THREADS,
// FLATLINE_RUN_T0, each checked (RANK=abc or RANK >= WORLD_SIZE exit 2 at once); 0 done, 2 a RankError
// (a collective, the file system or a checkpoint failed), 3 stopped for the scenario's restart, 4
// parameters diverged across ranks, 5 a broken invariant, 6 any other internal error; 2 too for an
// environment that is not what the protocol says; 128 + N after signal N (SIGTERM, SIGINT, SIGHUP, or the
// launcher's death), telemetry flushed and an `interrupted` event last (core/interrupt.h).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli/command.h"
#include "faults/intervention.h"
#include "core/check.h"
#include "core/checkpoint_request.h"
#include "core/interrupt.h"
#include "core/protocol.h"
#include "faults/scenario_file.h"
#include "sim/trainer.h"
#include "telemetry/writers/writer.h"

namespace flatline::cli {
namespace {

// A protocol variable, checked: an integer in [lo, hi] (RANK=abc or RANK=5 of 2 is refused at once, not
// taken as rank 0 or left waiting for the store). Slurm's SLURM_NTASKS_PER_NODE may read "2(x3)": its
// leading count is the tasks of this node.
class EnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EnvInt {
  const char* name = nullptr;  // the variable that was set (nullptr: neither)
  int64_t value = 0;
};

// FLATLINE_RUN_T0's bounds: not before 2001-09-09 (1e9 s), not more than a minute ahead of this clock.
constexpr double kMinRunT0 = 1e9, kRunT0SlackS = 60;

EnvInt env_int(const char* a, const char* b, int64_t lo, int64_t hi, bool leading_count = false) {
  for (const char* name : {a, b}) {
    if (!name) continue;
    const char* v = std::getenv(name);
    if (!v) continue;
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    const bool tail_ok = *end == 0 || (leading_count && (*end == '(' || *end == ','));
    if (end == v || !tail_ok || errno == ERANGE || x < lo || x > hi)
      throw EnvError(fmt::format("{}='{}': expected an integer in [{}, {}] (docs/DESIGN.md §8)", name, v, lo, hi));
    return {name, x};
  }
  return {};
}

struct Args {
  std::string scenario, run_dir, formats, repair;
  bool resume = false, carry_on = false, checkpoint_at_stop = false;
  int64_t stop_after = -1, eval_from = -1;
  PlacementArgs placement;
};

// The launcher protocol's environment (core/protocol.h), every variable checked against the others.
void read_environment(RankOptions& o) {
  const EnvInt world = env_int(kEnvWorldSize, kEnvSlurmWorldSize, 1, 1 << 20);
  o.world_size = world.name ? static_cast<int>(world.value) : 1;
  const EnvInt rank = env_int(kEnvRank, kEnvSlurmRank, 0, o.world_size - 1);
  o.rank = static_cast<int>(rank.value);
  if (o.world_size > 1 && !rank.name)
    throw EnvError(fmt::format("{}={} but {} (or {}) is not set: every rank needs its own", world.name, o.world_size,
                               kEnvRank, kEnvSlurmRank));
  const EnvInt local = env_int(kEnvLocalWorldSize, kEnvSlurmLocalWorldSize, 1, o.world_size, /*leading_count=*/true);
  o.local_world_size = local.name ? static_cast<int>(local.value) : o.world_size;
  const EnvInt local_rank = env_int(kEnvLocalRank, kEnvSlurmLocalRank, 0, o.local_world_size - 1);
  o.local_rank = local_rank.name ? static_cast<int>(local_rank.value) : -1;
  if (const char* addr = std::getenv(kEnvMasterAddr)) {
    if (!*addr) throw EnvError(fmt::format("{} is set but empty: expected the host of rank 0", kEnvMasterAddr));
    o.master_addr = addr;
  }
  const EnvInt port = env_int(kEnvMasterPort, nullptr, 1, 65535);
  o.master_port = port.name ? static_cast<int>(port.value) : kDefaultMasterPort;
  // Intra-op threads: at most this machine's (more only thrash; 4096 on 2 cores was accepted once).
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  o.threads = static_cast<int>(env_int(kEnvThreads, nullptr, 1, cores).value);
  if (const char* t = std::getenv(kEnvRunT0)) {
    // The run's clock origin: a time that has been (a resumed run keeps its origin, days back), never
    // one ahead of now, which would make every record's t negative and run backwards.
    char* end = nullptr;
    o.run_t0 = std::strtod(t, &end);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (end == t || *end || !std::isfinite(o.run_t0) || o.run_t0 < kMinRunT0 || o.run_t0 > now + kRunT0SlackS)
      throw EnvError(fmt::format("{}='{}': expected the run's start in epoch seconds, between {:.0f} and now ({:.0f})",
                                 kEnvRunT0, t, kMinRunT0, now));
  }
}

int run_worker(const Args& a) {
  // first, before any thread starts: the launcher's checkpoint requests are counted by a thread of their
  // own (core/checkpoint_request.h); a signal from here on flushes what this rank wrote (core/interrupt.h)
  install_checkpoint_request_counter();
  install_interrupt_handlers();
  RankOptions o;
  try {
    read_environment(o);
  } catch (const EnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  }
  o.scenario = load_scenario_file(a.scenario);
  a.placement.apply(o.scenario);
  o.run_dir = a.run_dir;
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
    static constexpr const char* kKind[] = {"comm", "io", "checkpoint", "device"};  // RankError::Kind's order
    std::cerr << fmt::format("rank {} failed [{}]: {}\n", o.rank, kKind[static_cast<int>(e.kind())], e.what());
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
  sub.add_option("--repair", a->repair, "a replay: the repair to make (a JSON RepairSpec, faults/intervention.h)");
  a->placement.add(sub);
  sub.add_option("--formats", a->formats, "also write these foreign-format logs on rank 0 (comma-separated: " +
                                              format_names() + ")");
  return [a] { return run_worker(*a); };
});

}  // namespace
}  // namespace flatline::cli
