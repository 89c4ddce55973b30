// `flatline score [SCENARIO|DIR|RUN_DIR|CORPUS ...] [--detector NAME=COMMAND]... [--out DIR] [--json FILE]
// [--junit FILE] [--realtime] [--speed X] [--formats LIST] [--gate NAMES] [--confirm]`: scores the built-in
// detector suite, and every external detector given (docs/DETECTORS.md), side by side on a suite.
// --confirm also confirms each run's built-in diagnosis by counterfactual (flatline confirm, docs/DESIGN.md
// §14: replays in RUN_DIR/confirm) and scores each confirmation against the truth (the "confirmed" column).
// Inputs: scenario files, directories searched for *.yaml (default: the embedded main suite) — these
// are trained now, each run recorded under --out, which becomes a corpus (telemetry/corpus.h); a
// recorded run directory (manifest.json) or a corpus (corpus.json) — replayed, nothing trained.
// Fleet-only scenarios (`fleet_only: true`) are skipped with a line saying so; a scenario beyond the local
// world-size guard (cli/local_guard.h), or a --json/--junit path that cannot be written, stops the suite
// before anything runs. A run that failed for a reason other than its fault (a rank killed, the
// watchdog's stop, an interrupt) is a harness error: JUnit <error type="harness">, never the detector's
// false alarm. SIGTERM / SIGINT / SIGHUP stop the run in progress (cli/launch.h) and the suite after it;
// the scoreboard of the runs done so far is still printed and written.
// Exit status: 0 every gated detector met every expectation (and, with --confirm, every confirmation is
// right); 1 below the bar (an expectation missed, a confirmation wrong);
// 2 usage, scenario or corpus error (nothing scored); 3 harness failure (a run failed other than by
// its injected fault, or could not be run, or a report could not be written); 4 a gated detector failed
// (crash, hang, garbage, flood, unread stdin) on some run. When several apply: 3, then 4, then 1;
// 128 + N when signal N interrupted the suite.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "cli/command.h"
#include "cli/confirm_run.h"
#include "cli/embedded.h"
#include "cli/launch.h"
#include "cli/local_guard.h"
#include "cli/reenact.h"
#include "core/atomic_file.h"
#include "core/interrupt.h"
#include "core/printable.h"
#include "core/protocol.h"
#include "core/safe_path.h"
#include "detectors/scoreboard.h"
#include "readers/replay.h"
#include "telemetry/corpus.h"
#include "telemetry/writers/writer.h"

namespace flatline::cli {
namespace {
namespace fs = std::filesystem;

constexpr int kExitBelowBar = 1, kExitUsage = 2, kExitHarness = 3, kExitDetector = 4;

struct Args {
  std::vector<std::string> inputs, detectors, formats, gate;
  std::string out = "runs", json, junit;
  PlacementArgs placement;
  TrainerArg trainer;
  bool realtime = false, confirm = false, oversubscribe = false;
  double speed = 0;
  double stall_s = FeedLimits{}.stall_s, exit_s = FeedLimits{}.exit_s;
};

// One thing to score: a scenario to train, or a recorded run directory to replay.
struct Input {
  std::string source, text;  // scenario: where from, its YAML
  std::string recorded;      // recorded run directory ("" = train)
  std::string corpus;        // the corpus it belongs to, if any
};

bool is_run_dir(const fs::path& p) { return fs::is_regular_file(p / "manifest.json") && fs::is_directory(p / "telemetry"); }

// A recorded run is untrusted input (docs/DESIGN.md §9): its manifest is read and checked, and each of
// its telemetry files opened as input (a link, a FIFO, a device, a sparse file refused), before anything
// is scored: a tampered run is a corpus error (exit 2), never a half-scored suite. Throws CorpusError.
void check_recorded(const std::string& run) {
  try {
    (void)read_manifest(run + "/manifest.json");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run + "/telemetry", ec))
      ::close(open_input(e.path().string(), kMaxLogFileBytes, "a telemetry file"));
  } catch (const InputError& e) {
    throw CorpusError(e.what());
  }
}

std::vector<Input> collect(const std::vector<std::string>& args, std::vector<CorpusRun>& verified) {
  std::vector<Input> out;
  if (args.empty()) {
    for (const auto& [name, text] : embedded_scenarios()) out.push_back({"<embedded>/" + name, text, "", ""});
    return out;
  }
  for (const auto& a : args) {
    if (!fs::is_directory(a)) {
      out.push_back({a, read_text_file(a), "", ""});
      continue;
    }
    if (is_corpus(a)) {  // every file re-hashed against corpus.json before anything is scored
      Corpus c = read_corpus(a);
      for (const auto& r : c.runs) {
        out.push_back({(fs::path(a) / r.name).string(), "", (fs::path(a) / r.name).string(), a});
        verified.push_back(r);
      }
      continue;
    }
    if (is_run_dir(a)) {
      out.push_back({a, "", a, ""});
      continue;
    }
    std::vector<std::string> files;
    std::set<std::string> runs;
    for (auto it = fs::recursive_directory_iterator(a); it != fs::recursive_directory_iterator(); ++it) {
      const auto& e = *it;
      if (e.is_directory() && is_run_dir(e.path())) {
        runs.insert(e.path().string());
        it.disable_recursion_pending();  // a run's own tree (a confirmation's replays) holds no scenario to train
      }
      if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const auto& r : runs) out.push_back({r, "", r, ""});  // recorded runs are replayed, never retrained
    for (const auto& f : files)
      if (!runs.count(fs::path(f).parent_path().string())) out.push_back({f, read_text_file(f), "", ""});
  }
  return out;
}

std::vector<std::string> split_list(const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (const auto& s : v)
    for (size_t a = 0; a <= s.size();) {
      size_t b = s.find(',', a);
      if (b == std::string::npos) b = s.size();
      if (b > a) out.push_back(s.substr(a, b - a));
      a = b + 1;
    }
  return out;
}

// --confirm: the run's diagnosis confirmed by counterfactual (its replays under RUN_DIR/confirm).
RunConfirmation confirm_one(const std::string& run_dir, const Args& a) {
  RunConfirmation c;
  ConfirmRunOptions o;
  o.placement = a.placement;
  try {
    const ConfirmResult r = confirm_run(run_dir, o);
    c.verdict = to_string(r.verdict);
    c.reason = r.reason;
    c.margin = r.comparison.difference;
    c.needed = r.comparison.threshold;
    c.wall_s = r.wall_s;
    c.steps_trained = r.prefix.steps_trained + r.control_run.steps_trained + r.repaired_run.steps_trained;
    if (r.verdict != Verdict::nothing_to_confirm)
      std::cout << fmt::format("  confirm: {}: {} ({:.1f} s)\n", c.verdict, c.reason, c.wall_s) << std::flush;
  } catch (const std::exception& e) {
    c.verdict = "error";
    c.reason = std::string("cannot replay the run: ") + e.what();
    std::cout << "  confirm: " << c.reason << "\n" << std::flush;
  }
  return c;
}

std::string said(const DetectorRunScore& r) {
  if (!r.error.empty()) return "detector error";
  if (!r.alarmed) return "healthy";
  return r.cause.diagnosis.cause;
}

int score(const Args& a) {
  // --- everything is checked before anything runs (exit 2) ---
  std::vector<ExternalDetectorSpec> dets;
  try {
    for (const auto& d : a.detectors) {
      dets.push_back(parse_detector_spec(d));
      if (dets.back().name == kBuiltinDetector)
        throw std::invalid_argument(std::string("--detector: the name '") + kBuiltinDetector +
                                    "' is the built-in suite's; choose another");
    }
    std::set<std::string> names;
    for (const auto& d : dets)
      if (!names.insert(d.name).second) throw std::invalid_argument("--detector: two detectors named '" + d.name + "'");
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  }
  const auto formats = split_list(a.formats);
  for (const auto& f : formats)
    if (!is_format_name(f)) {
      std::cerr << "error: --formats: unknown format '" << f << "' (expected " << format_names() << ")\n";
      return kExitUsage;
    }
  std::set<std::string> gate;
  for (const auto& g : split_list(a.gate)) {
    if (g != kBuiltinDetector && std::none_of(dets.begin(), dets.end(), [&](const auto& d) { return d.name == g; })) {
      std::cerr << "error: --gate: no detector named '" << g << "'\n";
      return kExitUsage;
    }
    gate.insert(g);
  }
  // reports that cannot be written are refused now, not found out after the suite ran
  for (const std::string* path : {&a.json, &a.junit})
    if (!path->empty()) {
      try {
        check_writable_output(*path);
      } catch (const FileWriteError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return kExitUsage;
      }
    }
  std::vector<CorpusRun> hashed;
  std::vector<Input> ins;
  try {
    ins = collect(a.inputs, hashed);
    for (const auto& in : ins)
      if (!in.recorded.empty()) check_recorded(in.recorded);
  } catch (const CorpusError& e) {
    std::cerr << "error: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  if (ins.empty()) throw ScenarioError("no scenarios found (*.yaml) in the given files or directories");
  std::vector<Scenario> scenarios;
  std::vector<Input> kept;
  std::map<std::string, std::string> names;  // name -> source: two runs may not share a run directory
  const MachineCapacity here = this_machine();
  int fleet_only = 0;
  for (auto& in : ins) {
    Scenario s;
    if (in.recorded.empty()) {
      s = load_scenario_text(in.text, in.source);  // fail fast
      a.placement.apply(s);
      a.trainer.apply(s);
      if (s.fleet_only) {  // for `flatline simulate`: said, not silently dropped
        std::cout << fmt::format("skip {}: fleet-only (world_size {}): flatline simulate {}\n", in.source,
                                 s.world_size, in.source);
        ++fleet_only;
        continue;
      }
      if (const std::string why = local_world_refusal(s, here, a.oversubscribe); !why.empty()) throw ScenarioError(why);
      auto [it, fresh] = names.emplace(s.name, in.source);
      if (!fresh)
        throw ScenarioError(in.source + ": scenario name '" + it->first + "' is also used by " + it->second +
                            " (each run needs its own directory)");
    }
    scenarios.push_back(std::move(s));
    kept.push_back(std::move(in));
  }
  if (kept.empty())
    throw ScenarioError(fmt::format("nothing to run: the {} scenario(s) found are fleet-only (flatline simulate)",
                                    fleet_only));
  ins = std::move(kept);
  install_launcher_signals();  // a signal stops the run in progress and the suite after it
  int interrupted = 0;

  FeedLimits limits;
  limits.stall_s = a.stall_s;
  limits.exit_s = a.exit_s;
  const bool paced = a.realtime || a.speed > 0;
  const double speed = a.speed > 0 ? a.speed : 1.0;
  // Replays re-enact each run for each detector under a directory of flatline's own (core/safe_path.h):
  // the only one score ever deletes.
  const std::string scratch = dets.empty() ? "" : make_owned_temp_dir(fmt::format("flatline-score-{}", ::getpid()));

  std::vector<Manifest> manifests;
  std::vector<std::vector<DetectorRunScore>> rows;
  std::vector<std::optional<RunConfirmation>> confirmations;
  std::vector<std::string> trained, harness_failures, corpora;
  for (size_t i = 0; i < ins.size() && !interrupted; ++i) {
    const Input& in = ins[i];
    Manifest m;
    Diagnosis builtin;
    std::vector<ExternalOutcome> outcomes;
    const auto t_start = std::chrono::steady_clock::now();
    try {
      if (in.recorded.empty()) {
        const Scenario& s = scenarios[i];
        std::cout << fmt::format("[{}/{}] {} ({} ranks, {} steps) ... ", i + 1, ins.size(), s.name, s.world_size, s.steps)
                  << std::flush;
        LaunchOptions o;
        o.run_dir = a.out + "/" + s.name;
        o.self_exe = self_exe();
        o.live_print = false;
        o.device = a.placement.device;
        o.process_group = a.placement.process_group;
        o.detectors = dets;
        o.detector_limits = limits;
        o.formats = formats;
        o.detector_env = format_env(o.run_dir, merged_formats(s, formats));
        o.oversubscribe = a.oversubscribe;
        LaunchResult r = launch_run(s, in.text, o);
        m = r.manifest;
        builtin = r.diagnosis;
        outcomes = r.detector_outcomes;
        trained.push_back(s.name);
        interrupted = r.interrupted_by;
        for (const auto& e : r.write_errors) harness_failures.push_back(s.name + ": " + e);
      } else {
        m = read_manifest(in.recorded + "/manifest.json");
        std::cout << fmt::format("[{}/{}] {} (recorded, {} ranks, {} steps) ... ", i + 1, ins.size(), m.scenario,
                                 m.world_size, m.steps)
                  << std::flush;
        LogData log = read_log(in.recorded, "flatline");
        builtin = replay(log);
        if (!dets.empty()) {
          Reenactment re(scratch, m, dets, formats_of(in.recorded, formats), in.recorded);
          FeedOptions fo;
          fo.mode = paced ? FeedMode::paced : FeedMode::unpaced;
          fo.world_size = m.world_size;
          fo.limits = limits;
          fo.run_dirs = re.run_dirs();
          fo.run_envs = re.envs();
          fo.on_release = [&re](size_t d, const Record& r) { re.write(d, r); };
          fo.interrupted = [] { return launcher_interrupt(); };  // SIGTERM stops the detectors too, in ~1 s
          outcomes = feed_recorded(log.records, dets, fo, speed);
        }
        if (!in.corpus.empty() && std::find(corpora.begin(), corpora.end(), in.corpus) == corpora.end())
          corpora.push_back(in.corpus);
        if (in.corpus.empty()) hashed.push_back(hash_run(fs::path(in.recorded).parent_path().string(),
                                                         fs::path(in.recorded).filename().string()));
      }
    } catch (const ScenarioError&) {
      throw;
    } catch (const std::exception& e) {
      std::cout << "HARNESS FAILURE: " << printable(e.what()) << "\n" << std::flush;
      harness_failures.push_back(in.source + ": " + e.what());
      continue;
    }
    if (launcher_interrupt() && in.recorded.size() &&
        std::any_of(outcomes.begin(), outcomes.end(), [](const ExternalOutcome& x) { return x.interrupted; })) {
      interrupted = launcher_interrupt();  // stopped half-way: not scored, said below
      std::cout << "interrupted\n" << std::flush;
      break;
    }
    std::vector<DetectorRunScore> row = {score_builtin_run(m, builtin)};
    for (const auto& o : outcomes) row.push_back(score_external_run(m, o));
    if (row.front().cause.harness_error)  // failed other than by its fault, interrupted, never finished
      harness_failures.push_back(m.scenario + ": " + (m.error.empty() ? "run " + m.status : m.error));
    std::string line;
    for (const auto& r : row)
      line += fmt::format("{}{}: {} -> {}", line.empty() ? "" : "; ", r.detector, said(r),
                          r.expect_met              ? "ok"
                          : r.cause.harness_error ? "ERROR: " + r.expect_detail  // the run's, not the detector's
                                                  : "EXPECT NOT MET: " + r.expect_detail);
    const double secs = in.recorded.empty()
                            ? m.wall_s
                            : std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::cout << fmt::format("{} ({:.{}f} s)\n", printable(dets.empty() ? line.substr(line.find(": ") + 2) : line), secs,
                             in.recorded.empty() ? 0 : 2)
              << std::flush;
    if (a.confirm) confirmations.push_back(confirm_one(in.recorded.empty() ? a.out + "/" + m.scenario : in.recorded, a));
    manifests.push_back(std::move(m));
    rows.push_back(std::move(row));
    if (!interrupted) interrupted = launcher_interrupt();
  }
  if (interrupted)
    std::cout << fmt::format("\ninterrupted by {}: {} of {} run(s) done\n", signal_name(interrupted), rows.size(),
                             ins.size());
  if (!scratch.empty()) remove_owned_dir(scratch);

  Scoreboard board = make_scoreboard(std::move(manifests), std::move(rows), std::move(confirmations));
  if (!trained.empty()) {  // what this invocation recorded is a corpus
    Corpus c = make_corpus(a.out, trained);
    write_corpus(c, a.out);
    hashed.insert(hashed.end(), c.runs.begin(), c.runs.end());
    corpora.push_back(a.out);
  }
  if (!hashed.empty()) {
    board.corpus_id = corpus_id(hashed);
    for (const auto& c : corpora) board.corpus_dir += (board.corpus_dir.empty() ? "" : " + ") + c;
    if (board.corpus_dir.empty()) board.corpus_dir = "recorded runs";
  }
  std::cout << "\n" << render_scoreboard(board);
  auto write = [&](const std::string& path, const std::string& text, const char* what) {
    if (path.empty()) return;
    try {
      write_file_atomic(path, text, what);  // whole or not at all, and a failure said (core/atomic_file.h)
    } catch (const FileWriteError& e) {
      harness_failures.push_back(e.what());
    }
  };
  write(a.json, to_json(board) + "\n", "the scoreboard JSON");
  write(a.junit, to_junit(board), "the JUnit XML");

  // --- the exit status ---
  int missed = 0, errors = 0;
  for (const auto& row : board.runs)
    for (const auto& r : row) {
      if (!gate.empty() && !gate.count(r.detector)) continue;
      errors += !r.error.empty();
      missed += !r.expect_met && r.error.empty();
    }
  for (const auto& h : harness_failures) std::cout << "harness failure: " << printable(h) << "\n";
  if (errors) std::cout << fmt::format("{} run(s) scored 'detector error' (see above)\n", errors);
  if (interrupted) return kExitSignalBase + interrupted;  // as a shell expects: 130, 143
  if (!harness_failures.empty()) return kExitHarness;
  if (errors) return kExitDetector;
  return missed || board.confirmations_right < board.confirmations_judged ? kExitBelowBar : 0;
}

FLATLINE_COMMAND("score", "score the built-in detectors, and external ones, on a suite or a recorded corpus", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("inputs", a->inputs,
                 "scenario files or directories (trained now; default: the embedded main suite), recorded run "
                 "directories or corpora (replayed)");
  sub.add_option("--detector", a->detectors,
                 "NAME=COMMAND: an external detector, started through /bin/sh -c for every run with "
                 "FLATLINE_RUN_DIR and FLATLINE_WORLD_SIZE set; telemetry JSONL on its stdin, alarms "
                 "({\"cause\", \"rank\", \"evidence\"}, each optional) on its stdout (docs/DETECTORS.md). Repeatable");
  sub.add_option("--out", a->out, "where trained runs are recorded, as a corpus (default runs/)");
  sub.add_option("--json", a->json, "also write the scoreboard as JSON");
  a->placement.add(sub);
  a->trainer.add(sub);
  sub.add_option("--junit", a->junit, "also write JUnit XML (one testcase per scenario x detector)");
  sub.add_flag("--realtime", a->realtime, "replays: pace the records by their recorded time (default: as fast as each detector reads)");
  sub.add_option("--speed", a->speed, "replays: X times faster than recorded (implies --realtime)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--formats", a->formats,
                 "also write foreign-format logs, live, for file-reading detectors: " + format_names() +
                     " (comma-separated; adds to the scenario's `formats`)");
  sub.add_flag("--oversubscribe", a->oversubscribe,
               "more ranks than the local guard allows per core (cli/local_guard.h; memory is still checked)");
  sub.add_option("--gate", a->gate, "detectors whose results decide the exit status (comma-separated; default: all)");
  sub.add_flag("--confirm", a->confirm,
               "also confirm each run's diagnosis by counterfactual (flatline confirm: replays in RUN_DIR/confirm) and "
               "score the confirmations against the truth");
  sub.add_option("--detector-stall-s", a->stall_s, "a detector that reads nothing this long while records wait is an error")
      ->check(CLI::PositiveNumber);
  sub.add_option("--detector-exit-s", a->exit_s, "a detector that has not exited this long after its stdin closed is an error")
      ->check(CLI::PositiveNumber);
  sub.footer(
      "Exit status: 0 every gated detector met every expectation (and every confirmation is right); 1 an expectation "
      "missed or a confirmation wrong; 2 usage, scenario or corpus error; 3 harness failure; 4 a gated detector failed "
      "on some run (3, then 4, then 1 when several apply); 128 + N when signal N interrupted it.");
  return [a] { return score(*a); };
});

}  // namespace
}  // namespace flatline::cli
