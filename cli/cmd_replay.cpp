// `flatline replay RUN [--realtime] [--speed X] [--format F]`: feeds recorded telemetry (any format
// `flatline diagnose` reads) through the detectors in recorded order, as if live: prints each finding
// the moment its detector fires and each checklist line when it changes state, then the same
// diagnosis as `flatline diagnose` (and as the live run). --realtime paces records by their t;
// --speed X plays X times faster (and implies --realtime). Exit status: 0, or 2 when nothing is readable.
#include <cstdlib>
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "cli/replay.h"

namespace flatline::cli {
namespace {

struct Args {
  std::string path, format = "auto";
  bool realtime = false;
  double speed = 0;
};

int run_replay(const Args& a) {
  try {
    LogStream log(a.path, parse_log_format(a.format));
    std::cout << fmt::format("replaying {} ({}) from {} file(s){}\n",
                             log.streaming() ? "records as read" : "the records", log.format(), log.files().size(),
                             a.realtime || a.speed > 0 ? fmt::format(", paced at {}x", a.speed > 0 ? a.speed : 1.0) : "")
              << std::flush;
    ReplayOptions o;
    o.realtime = a.realtime || a.speed > 0;
    o.speed = a.speed > 0 ? a.speed : 1.0;
    o.on_finding = [](const Finding& f) {
      std::cout << fmt::format("[step {}] FINDING {}{}: onset step {}{}\n", f.detected_step, f.cause,
                               f.rank >= 0 ? fmt::format(" on rank {}", f.rank) : "", f.onset_step,
                               f.evidence.empty() ? "" : " - " + f.evidence.front())
                << std::flush;
    };
    o.on_check = [](const CheckResult& c, int64_t step) {
      if (c.state == CheckState::pending) return;
      std::cout << fmt::format("[step {}] check {:<20} {:<11} {}\n", step, c.cause,
                               c.state == CheckState::fail ? "FAIL" : to_string(c.state), c.detail)
                << std::flush;
    };
    Diagnosis d = replay(log, o);
    for (const auto& w : log.warnings()) std::cerr << "warning: " << w << "\n";
    std::cout << fmt::format("\n{} records replayed\n", log.records()) << to_text(d);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

FLATLINE_COMMAND("replay", "replay recorded telemetry or a log through the detectors as if live", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("run", a->path, "run directory, log file or log directory")->required();
  sub.add_flag("--realtime", a->realtime, "pace the records by their recorded time");
  sub.add_option("--speed", a->speed, "play X times faster than recorded (implies --realtime)")
      ->check([](const std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return *end == 0 && x > 0 && x < 1e9 ? std::string() : "--speed: expected a number > 0, got '" + v + "'";
      });
  sub.add_option("--format", a->format, format_choices() + " (default auto)");
  return [a] { return run_replay(*a); };
});

}  // namespace
}  // namespace flatline::cli
