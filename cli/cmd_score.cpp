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
#include "scoring/scoreboard.h"
#include "faults/scenario_file.h"
#include "cli/replay.h"
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

// What score() runs with, all checked before anything runs (a usage error: exit 2).
struct Checked {
  std::vector<ExternalDetectorSpec> dets;
  std::vector<std::string> formats;
  std::set<std::string> gate;  // empty: every detector decides the exit status
};

// Returns the usage error ("" when none).
std::string check_options(const Args& a, Checked& c) {
  try {
    std::set<std::string> names;
    for (const auto& d : a.detectors) {
      c.dets.push_back(parse_detector_spec(d));
      if (c.dets.back().name == kBuiltinDetector)
        throw std::invalid_argument(std::string("--detector: the name '") + kBuiltinDetector +
                                    "' is the built-in suite's; choose another");
      if (!names.insert(c.dets.back().name).second)
        throw std::invalid_argument("--detector: two detectors named '" + c.dets.back().name + "'");
    }
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  c.formats = split_list(a.formats);
  for (const auto& f : c.formats)
    if (!is_format_name(f)) return "--formats: unknown format '" + f + "' (expected " + format_names() + ")";
  for (const auto& g : split_list(a.gate)) {
    if (g != kBuiltinDetector && std::none_of(c.dets.begin(), c.dets.end(), [&](const auto& d) { return d.name == g; }))
      return "--gate: no detector named '" + g + "'";
    c.gate.insert(g);
  }
  // reports that cannot be written are refused now, not found out after the suite ran
  for (const std::string* path : {&a.json, &a.junit})
    if (!path->empty()) {
      try {
        check_writable_output(*path);
      } catch (const FileWriteError& e) {
        return e.what();
      }
    }
  return "";
}

// The inputs, each scenario loaded (fail fast), fleet-only ones skipped with a line, the local
// world-size guard applied, run names unique. Throws CorpusError (a tampered recorded run) and
// ScenarioError.
struct Suite {
  std::vector<Input> ins;
  std::vector<Scenario> scenarios;  // one per input (empty for a recorded run)
  std::vector<CorpusRun> hashed;    // the recorded runs' hashes, verified
};

Suite load_suite(const Args& a) {
  Suite suite;
  std::vector<Input> ins = collect(a.inputs, suite.hashed);
  for (const auto& in : ins)
    if (!in.recorded.empty()) check_recorded(in.recorded);
  if (ins.empty()) throw ScenarioError("no scenarios found (*.yaml) in the given files or directories");
  std::map<std::string, std::string> names;  // name -> source: two runs may not share a run directory
  const MachineCapacity here = this_machine();
  int fleet_only = 0;
  for (auto& in : ins) {
    Scenario s;
    if (in.recorded.empty()) {
      s = load_scenario_text(in.text, in.source);
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
    suite.scenarios.push_back(std::move(s));
    suite.ins.push_back(std::move(in));
  }
  if (suite.ins.empty())
    throw ScenarioError(fmt::format("nothing to run: the {} scenario(s) found are fleet-only (flatline simulate)",
                                    fleet_only));
  return suite;
}

// One run's result: its truth, the built-in diagnosis, each external detector's outcome.
struct RunResult {
  Manifest m;
  Diagnosis builtin;
  std::vector<ExternalOutcome> outcomes;
};

// The suite as it goes: what was scored, recorded and failed.
struct Session {
  const Args& a;
  const Checked& c;
  FeedLimits limits;
  std::string scratch;  // the replays' re-enactments: a directory of score's own (core/safe_path.h)
  std::vector<Manifest> manifests;
  std::vector<std::vector<DetectorRunScore>> rows;
  std::vector<std::optional<RunConfirmation>> confirmations;
  std::vector<std::string> trained, harness_failures, corpora;
  std::vector<CorpusRun> hashed;
  int interrupted = 0;
};

RunResult train(Session& ss, const Input& in, const Scenario& s) {
  LaunchOptions o;
  o.run_dir = ss.a.out + "/" + s.name;
  o.self_exe = self_exe();
  o.live_print = false;
  o.device = ss.a.placement.device;
  o.process_group = ss.a.placement.process_group;
  o.detectors = ss.c.dets;
  o.detector_limits = ss.limits;
  o.formats = ss.c.formats;
  o.detector_env = format_env(o.run_dir, merged_formats(s, ss.c.formats));
  o.oversubscribe = ss.a.oversubscribe;
  LaunchResult r = launch_run(s, in.text, o);
  ss.trained.push_back(s.name);
  ss.interrupted = r.interrupted_by;
  for (const auto& e : r.write_errors) ss.harness_failures.push_back(s.name + ": " + e);
  return {r.manifest, r.diagnosis, r.detector_outcomes};
}

RunResult replay_recorded(Session& ss, const Input& in, const Manifest& m) {
  RunResult res{m, {}, {}};
  LogData log = read_log(in.recorded, "flatline");
  res.builtin = replay(log);
  if (!ss.c.dets.empty()) {
    Reenactment re(ss.scratch, m, ss.c.dets, formats_of(in.recorded, ss.c.formats), in.recorded);
    FeedOptions fo;
    fo.mode = ss.a.realtime || ss.a.speed > 0 ? FeedMode::paced : FeedMode::unpaced;
    fo.world_size = m.world_size;
    fo.limits = ss.limits;
    fo.run_dirs = re.run_dirs();
    fo.run_envs = re.envs();
    fo.on_release = [&re](size_t d, const Record& r) { re.write(d, r); };
    fo.interrupted = [] { return launcher_interrupt(); };  // SIGTERM stops the detectors too, in ~1 s
    res.outcomes = feed_recorded(log.records, ss.c.dets, fo, ss.a.speed > 0 ? ss.a.speed : 1.0);
  }
  if (!in.corpus.empty() && std::find(ss.corpora.begin(), ss.corpora.end(), in.corpus) == ss.corpora.end())
    ss.corpora.push_back(in.corpus);
  if (in.corpus.empty())
    ss.hashed.push_back(hash_run(fs::path(in.recorded).parent_path().string(), fs::path(in.recorded).filename().string()));
  return res;
}

// Scores one run and prints its line; the row, its manifest and its confirmation go into the session.
void score_one(Session& ss, const Input& in, RunResult r, double secs) {
  std::vector<DetectorRunScore> row = {score_builtin_run(r.m, r.builtin)};
  for (const auto& o : r.outcomes) row.push_back(score_external_run(r.m, o));
  if (row.front().cause.harness_error)  // failed other than by its fault, interrupted, never finished
    ss.harness_failures.push_back(r.m.scenario + ": " + (r.m.error.empty() ? "run " + r.m.status : r.m.error));
  std::string line;
  for (const auto& x : row)
    line += fmt::format("{}{}: {} -> {}", line.empty() ? "" : "; ", x.detector, said(x),
                        x.expect_met              ? "ok"
                        : x.cause.harness_error ? "ERROR: " + x.expect_detail  // the run's, not the detector's
                                                : "EXPECT NOT MET: " + x.expect_detail);
  std::cout << fmt::format("{} ({:.{}f} s)\n", printable(ss.c.dets.empty() ? line.substr(line.find(": ") + 2) : line),
                           secs, in.recorded.empty() ? 0 : 2)
            << std::flush;
  if (ss.a.confirm)
    ss.confirmations.push_back(confirm_one(in.recorded.empty() ? ss.a.out + "/" + r.m.scenario : in.recorded, ss.a));
  ss.manifests.push_back(std::move(r.m));
  ss.rows.push_back(std::move(row));
}

// Every input in turn, until a signal stops the suite.
void run_suite(Session& ss, const Suite& suite) {
  const size_t n = suite.ins.size();
  for (size_t i = 0; i < n && !ss.interrupted; ++i) {
    const Input& in = suite.ins[i];
    RunResult r;
    const auto t_start = std::chrono::steady_clock::now();
    try {
      if (in.recorded.empty()) {
        const Scenario& s = suite.scenarios[i];
        std::cout << fmt::format("[{}/{}] {} ({} ranks, {} steps) ... ", i + 1, n, s.name, s.world_size, s.steps)
                  << std::flush;
        r = train(ss, in, s);
      } else {
        const Manifest m = read_manifest(in.recorded + "/manifest.json");
        std::cout << fmt::format("[{}/{}] {} (recorded, {} ranks, {} steps) ... ", i + 1, n, m.scenario, m.world_size,
                                 m.steps)
                  << std::flush;
        r = replay_recorded(ss, in, m);
      }
    } catch (const ScenarioError&) {
      throw;
    } catch (const std::exception& e) {
      std::cout << "HARNESS FAILURE: " << printable(e.what()) << "\n" << std::flush;
      ss.harness_failures.push_back(in.source + ": " + e.what());
      continue;
    }
    if (launcher_interrupt() && in.recorded.size() &&
        std::any_of(r.outcomes.begin(), r.outcomes.end(), [](const ExternalOutcome& x) { return x.interrupted; })) {
      ss.interrupted = launcher_interrupt();  // stopped half-way: not scored, said below
      std::cout << "interrupted\n" << std::flush;
      break;
    }
    const double secs = in.recorded.empty()
                            ? r.m.wall_s
                            : std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    score_one(ss, in, std::move(r), secs);
    if (!ss.interrupted) ss.interrupted = launcher_interrupt();
  }
  if (ss.interrupted)
    std::cout << fmt::format("\ninterrupted by {}: {} of {} run(s) done\n", signal_name(ss.interrupted), ss.rows.size(), n);
}

// The scoreboard printed and written, and the exit status (the header's).
int finish(Session& ss) {
  Scoreboard board = make_scoreboard(std::move(ss.manifests), std::move(ss.rows), std::move(ss.confirmations));
  if (!ss.trained.empty()) {  // what this invocation recorded is a corpus
    Corpus c = make_corpus(ss.a.out, ss.trained);
    write_corpus(c, ss.a.out);
    ss.hashed.insert(ss.hashed.end(), c.runs.begin(), c.runs.end());
    ss.corpora.push_back(ss.a.out);
  }
  if (!ss.hashed.empty()) {
    board.corpus_id = corpus_id(ss.hashed);
    for (const auto& c : ss.corpora) board.corpus_dir += (board.corpus_dir.empty() ? "" : " + ") + c;
    if (board.corpus_dir.empty()) board.corpus_dir = "recorded runs";
  }
  std::cout << "\n" << render_scoreboard(board);
  auto write = [&](const std::string& path, const std::string& text, const char* what) {
    if (path.empty()) return;
    try {
      write_file_atomic(path, text, what);  // whole or not at all, and a failure said (core/atomic_file.h)
    } catch (const FileWriteError& e) {
      ss.harness_failures.push_back(e.what());
    }
  };
  write(ss.a.json, to_json(board) + "\n", "the scoreboard JSON");
  write(ss.a.junit, to_junit(board), "the JUnit XML");

  int missed = 0, errors = 0;
  for (const auto& row : board.runs)
    for (const auto& r : row) {
      if (!ss.c.gate.empty() && !ss.c.gate.count(r.detector)) continue;
      errors += !r.error.empty();
      missed += !r.expect_met && r.error.empty();
    }
  for (const auto& h : ss.harness_failures) std::cout << "harness failure: " << printable(h) << "\n";
  if (errors) std::cout << fmt::format("{} run(s) scored 'detector error' (see above)\n", errors);
  if (ss.interrupted) return kExitSignalBase + ss.interrupted;  // as a shell expects: 130, 143
  if (!ss.harness_failures.empty()) return kExitHarness;
  if (errors) return kExitDetector;
  return missed || board.confirmations_right < board.confirmations_judged ? kExitBelowBar : 0;
}

int score(const Args& a) {
  Checked c;
  if (const std::string usage = check_options(a, c); !usage.empty()) {
    std::cerr << "error: " << usage << "\n";
    return kExitUsage;
  }
  Suite suite;
  try {
    suite = load_suite(a);
  } catch (const CorpusError& e) {
    std::cerr << "error: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  install_launcher_signals();  // a signal stops the run in progress and the suite after it
  Session ss{a, c, {}, "", {}, {}, {}, {}, {}, {}, std::move(suite.hashed), 0};
  ss.limits.stall_s = a.stall_s;
  ss.limits.exit_s = a.exit_s;
  // Replays re-enact each run for each detector under a directory of flatline's own (core/safe_path.h):
  // the only one score ever deletes.
  if (!c.dets.empty()) ss.scratch = make_owned_temp_dir(fmt::format("flatline-score-{}", ::getpid()));
  run_suite(ss, suite);
  if (!ss.scratch.empty()) remove_owned_dir(ss.scratch);
  return finish(ss);
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
