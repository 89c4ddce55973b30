// The replays of a confirmation, trained by the launcher (cli/confirm_run.h).
#include "cli/confirm_run.h"

#include "core/input_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "cli/launch.h"
#include "cli/run_dir.h"
#include "core/atomic_file.h"
#include "core/protocol.h"
#include "faults/scenario_file.h"
#include "readers/reader.h"
#include "cli/replay.h"
#include "telemetry/jsonl.h"

namespace flatline::cli {
namespace {
namespace fs = std::filesystem;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string checkpoint_name(int64_t step) { return fmt::format("step-{:08d}", step); }  // sim/checkpoint.cpp's

// The steps of the run's complete checkpoints: the scenario's (checkpoints/step-N) and those the launcher
// asked for near a finding (checkpoints/live-step-N, docs/DESIGN.md §8).
struct Checkpoints {
  std::vector<int64_t> scheduled, live;
  std::string dir(const std::string& run_dir, int64_t step) const {  // the scenario's where both are
    const bool own = std::find(scheduled.begin(), scheduled.end(), step) != scheduled.end();
    return run_dir + "/checkpoints/" + (own ? checkpoint_name(step) : fmt::format("{}{:08d}", kLiveCheckpointPrefix, step));
  }
};

Checkpoints complete_checkpoints(const std::string& run_dir) {
  Checkpoints out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string(), live_prefix = kLiveCheckpointPrefix;
    const bool live = name.rfind(live_prefix, 0) == 0;
    if ((!live && name.rfind("step-", 0) != 0) || !fs::exists(e.path() / "COMPLETE")) continue;
    try {
      (live ? out.live : out.scheduled).push_back(std::stoll(name.substr(live ? live_prefix.size() : 5)));
    } catch (const std::exception&) {  // not one of ours
    }
  }
  return out;
}

// The replay starts from `checkpoint` (a checkpoints/step-N or live-step-N directory of step `step`):
// linked into its own checkpoints/ as step-N, the name its ranks start from, copied where the file
// system has no symbolic links.
void link_checkpoint(const std::string& checkpoint, int64_t step, const std::string& replay_dir) {
  const fs::path dst = fs::path(replay_dir) / "checkpoints" / checkpoint_name(step);
  fs::create_directories(dst.parent_path());
  std::error_code ec;
  fs::create_directory_symlink(fs::canonical(checkpoint), dst, ec);
  if (ec) fs::copy(checkpoint, dst, fs::copy_options::recursive);
}

std::vector<Record> rank0_records(const std::string& run_dir) {
  std::vector<std::string> warnings;
  const std::string path = run_dir + "/telemetry/rank-0.jsonl";
  if (!fs::exists(path)) return {};
  return read_jsonl(path, &warnings);
}

LaunchOptions::Start launch_start(ReplayStart s) {
  switch (s) {
    case ReplayStart::resume: return LaunchOptions::Start::resume;
    case ReplayStart::carry_on: return LaunchOptions::Start::carry_on;
    default: return LaunchOptions::Start::fresh;
  }
}

}  // namespace

ConfirmResult confirm_run(const std::string& run_dir, const ConfirmRunOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string scenario_file = run_dir + "/scenario.yaml";
  if (!fs::is_regular_file(scenario_file) || !fs::exists(run_dir + "/telemetry/rank-0.jsonl"))
    throw std::runtime_error(run_dir + ": not a flatline run directory (needs scenario.yaml and telemetry/rank-0.jsonl "
                                       "to replay the run)");
  // The run's directory is locked while it is confirmed (cli/run_dir.h): a `flatline run` into it now is
  // refused, instead of deleting the live replays under it.
  const RunDirLock lock = lock_prepared_run_dir(run_dir);
  // the run's own files are untrusted input (a run someone sent): no link, no FIFO (core/input_file.h)
  const std::string yaml = read_input_file(scenario_file, kMaxSmallFileBytes, "the run's scenario");
  Scenario s = load_scenario_text(yaml, scenario_file);
  if (s.fleet_only)
    throw std::runtime_error(scenario_file + ": fleet_only: a scenario for the fleet simulator; confirm replays a run "
                                             "on local ranks, which this scenario is not for");
  o.placement.apply(s);

  Diagnosis d;
  const std::string diag_file = run_dir + "/diagnosis.json";
  if (fs::exists(diag_file)) {
    d = diagnosis_from_json(read_input_file(diag_file, kMaxSmallFileBytes, "the run's diagnosis"), diag_file);
  } else {  // a run its launcher did not diagnose (workers under torchrun): diagnose its telemetry now
    if (o.progress) std::cout << "  (no diagnosis.json: diagnosing the telemetry)\n" << std::flush;
    d = diagnose_log(run_dir, "flatline", nullptr);
  }
  const std::vector<Record> original = rank0_records(run_dir);
  const Checkpoints cks = complete_checkpoints(run_dir);
  const ConfirmPlan plan = plan_confirmation(s, d, original, cks.scheduled, o.confirm, cks.live);

  const std::string out = o.out.empty() ? run_dir + "/confirm" : o.out;
  if (fs::exists(out) && !fs::is_empty(out) && !fs::exists(out + "/confirm.json"))
    throw std::runtime_error(out + ": exists and is not a confirmation's directory (no confirm.json); refusing to "
                                   "replace it: choose another --out");
  std::error_code ec;
  fs::remove_all(out, ec);
  fs::create_directories(out);

  auto replay = [&](const std::string& name, ReplayStart start, const std::string& checkpoint, int64_t checkpoint_step,
                    std::vector<std::string> args) {
    ReplayRun r;
    r.dir = out + "/" + name;
    fs::create_directories(r.dir);
    if (!checkpoint.empty()) link_checkpoint(checkpoint, checkpoint_step, r.dir);
    if (o.progress)
      std::cout << fmt::format("  {} replay ({}{}) ...", name, to_string(start),
                               checkpoint.empty() ? "" : " from " + fs::path(checkpoint).filename().string())
                << std::flush;
    LaunchOptions lo;
    lo.run_dir = r.dir;
    lo.self_exe = self_exe();
    lo.live_print = false;
    lo.threads_per_rank = o.threads_per_rank;
    lo.device = o.placement.device;
    lo.process_group = o.placement.process_group;
    lo.replay = true;
    lo.start = launch_start(start);
    lo.worker_args = std::move(args);
    const auto t = std::chrono::steady_clock::now();
    LaunchResult lr = launch_run(s, yaml, lo);
    r.ran = true;
    r.error = lr.first_error;
    while (!r.error.empty() && (r.error.back() == '\n' || r.error.back() == ' ')) r.error.pop_back();
    r.wall_s = since(t);
    r.rank0 = rank0_records(r.dir);
    for (const auto& x : r.rank0) r.steps_trained += x.kind == RecordKind::step;
    if (o.progress) std::cout << fmt::format(" {} steps, {:.1f} s{}\n", r.steps_trained, r.wall_s, r.error.empty() ? "" : " (ended with an error)") << std::flush;
    // A replay the harness could not carry out (a checkpoint that does not load, a full disk, missing
    // GPUs, a crash) says nothing about the diagnosis: the run cannot be replayed (exit 3), not an
    // ambiguous confirmation. A collective that failed, or the run's own hang, is what a replay may do.
    if (const std::string kind = rank_failure_kind(r.error); kind == "io" || kind == "checkpoint" || kind == "device")
      throw std::runtime_error(fmt::format("the {} replay cannot be carried out ({} failure): {}", name, kind, r.error));
    for (int bug : {kExitInvariant, kExitInternal, kExitExecFailed})
      if (r.error.find(fmt::format("exited with status {}:", bug)) != std::string::npos)
        throw std::runtime_error(fmt::format("the {} replay cannot be carried out: {}", name, r.error));
    return r;
  };

  ReplayRun prefix, control, repaired;
  if (plan.nothing.empty()) {
    std::string branch_ck;
    if (plan.needs_prefix()) {
      prefix = replay("prefix", plan.prefix_start, plan.checkpoint >= 1 ? cks.dir(run_dir, plan.checkpoint) : "",
                      plan.checkpoint, {"--stop-after", std::to_string(plan.branch), "--checkpoint-at-stop"});
      branch_ck = prefix.dir + "/checkpoints/" + checkpoint_name(plan.branch);
    } else if (plan.branch >= 1) {
      branch_ck = cks.dir(run_dir, plan.branch);
    }
    const bool branch_ok = branch_ck.empty() || fs::exists(branch_ck + "/COMPLETE");
    if (branch_ok) {
      std::vector<std::string> args = {"--stop-after", std::to_string(plan.end)};
      if (plan.held_out) args.insert(args.end(), {"--eval-from", std::to_string(plan.end - plan.compared + 1)});
      const ReplayStart start = plan.branch >= 1 ? plan.branch_start : ReplayStart::fresh;
      control = replay("control", start, branch_ck, plan.branch, args);
      const std::string repair_file = out + "/repair.json";
      write_file_atomic(repair_file, to_json(plan.repair) + "\n", "the repair");
      args.insert(args.end(), {"--repair", repair_file});
      repaired = replay("repaired", start, branch_ck, plan.branch, args);
    }
  }
  ConfirmResult r = judge(s, plan, original, prefix, control, repaired, o.confirm);
  r.run_dir = run_dir;
  r.wall_s = since(t0);
  write_file_atomic(out + "/confirm.json", to_json(r) + "\n", "the confirmation");
  return r;
}

}  // namespace flatline::cli
