// `flatline diagnose PATH [--format F] [--json]`: reads recorded telemetry or a real training log
// (readers/reader.h: a flatline run directory or JSONL, trainer_state.json, Megatron, DeepSpeed and
// console logs, Lightning metrics.csv, W&B history CSV and run directories, TensorBoard event files;
// F is auto or a reader's name), runs the detectors and prints the diagnosis with its checklist:
// what fired, what passed, and what could not run and what to log to make it possible.
// Warnings (file:line or file: byte N) go to stderr; what is valid is still diagnosed.
// Exit status: 0 diagnosed (whatever the cause), 2 nothing readable.
//
// `flatline diagnose --follow PATH [--exit-on-cause] [--poll S] [--for S]`: the same detectors on a
// live job's logs as they grow (readers/follow.h: appended lines, files rewritten at each save,
// rotation and truncation, files that appear later, a path that does not exist yet), printing each
// finding the moment its detector fires ("[step N] FINDING cause ..."), until interrupted (SIGINT,
// SIGTERM, SIGHUP) or --for seconds have passed; then the diagnosis. A path that is not there, a file
// that goes or one that is not a regular file is a warning, said once. --exit-on-cause stops at the first
// checklist cause with exit status 3, for a job's own watchdog. Exit status: 0, 3 (a cause, with
// --exit-on-cause), 2 (a bad option).
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/printable.h"
#include "readers/follow.h"
#include "cli/replay.h"

namespace flatline::cli {
namespace {

// Exit status of `diagnose --follow --exit-on-cause` when a checklist cause fired.
constexpr int kExitCause = 3;

struct Args {
  std::string path, format = "auto";
  bool json = false, follow = false, exit_on_cause = false;
  double poll_s = 0.2, for_s = 0;
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

void print(const Diagnosis& d, bool json) {
  if (json) std::cout << to_json(d) << "\n";
  else std::cout << to_text(d);
}

int diagnose(const Args& a) {
  try {
    LogStream log(a.path, parse_log_format(a.format));
    Diagnosis d = replay(log);
    for (const auto& w : log.warnings()) std::cerr << "warning: " << printable(w) << "\n";
    if (!a.json)
      std::cout << "read " << log.records() << " records (" << log.format() << ") from " << log.files().size()
                << " file(s)\n";
    print(d, a.json);
    return 0;
  } catch (const std::exception& e) {  // ReadError, or a bad --format
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

int follow(const Args& a) {
  std::unique_ptr<Follower> f;
  try {
    f = std::make_unique<Follower>(a.path, a.format);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  // SIGHUP too (a closed terminal, an ssh session gone): every stop ends with the diagnosis so far.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_signal);
  std::cout << fmt::format("following {} (every {} s){}\n", a.path, a.poll_s,
                           a.exit_on_cause ? ", exiting on the first checklist cause" : "")
            << std::flush;
  // The Triage starts with the first records: by then the files say their world size and plan.
  std::unique_ptr<Triage> tri;
  bool cause = false;
  double last_t = 0;
  size_t files = 0;
  auto feed = [&](std::vector<Record>& recs) {
    if (recs.empty()) return;
    if (!tri) {
      DetectorConfig cfg;
      cfg.world_size = f->world_size();
      cfg.planned_steps = f->facts().planned_steps;
      tri = std::make_unique<Triage>(cfg);
      tri->on_finding([&](const Finding& x) {
        std::cout << fmt::format("[step {}] FINDING {}{}: onset step {}{}\n", x.detected_step, x.cause,
                                 x.rank >= 0 ? fmt::format(" on rank {}", x.rank) : "", x.onset_step,
                                 x.evidence.empty() ? "" : " - " + x.evidence.front())
                  << std::flush;
        const auto& list = checklist_causes();
        cause |= std::find(list.begin(), list.end(), x.cause) != list.end();
      });
    }
    for (const auto& r : recs) {
      tri->observe(r);
      if (std::isfinite(r.t)) last_t = std::max(last_t, r.t);
    }
    recs.clear();
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<Record> recs;
  for (;;) {
    f->poll(recs);
    for (const auto& w : f->take_warnings()) std::cerr << "warning: " << printable(w) << "\n";
    if (f->files().size() != files) {
      files = f->files().size();
      std::cout << fmt::format("reading {} file(s) ({})\n", files, f->format()) << std::flush;
    }
    feed(recs);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if ((a.exit_on_cause && cause) || g_stop || (a.for_s > 0 && elapsed >= a.for_s)) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(a.poll_s));
  }
  if (!(a.exit_on_cause && cause)) {  // stopping: what the parsers still hold
    f->finish(recs);
    for (const auto& w : f->take_warnings()) std::cerr << "warning: " << printable(w) << "\n";
    feed(recs);
  }
  if (!tri) {
    std::cout << "no records yet\n";
    return 0;
  }
  tri->finish(last_t);
  std::cout << "\n";
  print(tri->diagnosis(), a.json);
  return a.exit_on_cause && cause ? kExitCause : 0;
}

FLATLINE_COMMAND("diagnose", "diagnose recorded telemetry or a training log (run dir, JSONL, HF, Megatron, ...)",
                 [](CLI::App& sub) {
                   auto a = std::make_shared<Args>();
                   sub.add_option("path", a->path, "run directory, log file or log directory")->required();
                   sub.add_option("--format", a->format, format_choices() + " (default auto)");
                   sub.add_flag("--json", a->json, "print the diagnosis as one JSON object");
                   sub.add_flag("--follow", a->follow, "follow a live job's logs as they grow, printing findings as they fire");
                   sub.add_flag("--exit-on-cause", a->exit_on_cause,
                                "with --follow: stop at the first checklist cause, exit status 3");
                   sub.add_option("--poll", a->poll_s, "with --follow: seconds between reads (default 0.2)")
                       ->check(CLI::Range(0.001, 3600.0));
                   sub.add_option("--for", a->for_s, "with --follow: stop after this many seconds (default: until interrupted)")
                       ->check(CLI::Range(0.0, 1e9));
                   return [a] { return a->follow ? follow(*a) : diagnose(*a); };
                 });

}  // namespace
}  // namespace flatline::cli
