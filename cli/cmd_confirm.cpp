// `flatline confirm RUN_DIR [--steps N] [--last K] [--out DIR] [--html FILE] [--device D] [--process-group G]`:
// confirms a run's diagnosis by counterfactual (docs/DESIGN.md §14): replays the run from the latest
// checkpoint before the diagnosed onset twice, as it was (the control) and with the named cause repaired,
// and says whether the repaired run's loss falls below the control's by more than the noise.
// Exit status: 0 confirmed; 1 not confirmed; 2 ambiguous (the control does not reproduce the run, too
// few steps to compare) or nothing to confirm (a healthy diagnosis, a fleet cause); 3 the run cannot be
// replayed (not a run directory, a bad diagnosis.json, an unwritable output).
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "core/atomic_file.h"
#include "cli/confirm_run.h"
#include "report/html.h"

namespace flatline::cli {
namespace {

constexpr int kExitCannotReplay = 3;

struct Args {
  std::string run_dir, html;
  ConfirmRunOptions run;
};

int confirm(const Args& a) {
  ConfirmResult r;
  try {
    r = confirm_run(a.run_dir, a.run);
  } catch (const std::exception& e) {
    std::cerr << "flatline confirm: " << e.what() << "\n";
    return kExitCannotReplay;
  }
  std::cout << to_text(r);
  const std::string out = a.run.out.empty() ? a.run_dir + "/confirm" : a.run.out;
  std::cout << fmt::format("  replays and confirm.json in {}\n", out);
  if (!a.html.empty()) {
    try {
      RunData run = load_run(a.run_dir);  // attaches RUN_DIR/confirm when it reads
      if (!a.run.out.empty() || !run.confirmation) attach_confirmation(run, out);
      write_file_atomic(a.html, html_report({run}, "flatline confirm: " + run.name, false), "the report");
      std::cout << "  report: " << a.html << "\n";
    } catch (const std::exception& e) {
      std::cerr << "flatline confirm: the report: " << e.what() << "\n";
      return kExitCannotReplay;
    }
  }
  return exit_code(r.verdict);
}

FLATLINE_COMMAND("confirm", "confirm a run's diagnosis: replay it with the named cause repaired", [](CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("run_dir", a->run_dir, "a recorded run directory (flatline run / score --out)")->required();
  sub.add_option("--steps", a->run.confirm.steps,
                 "steps each branch replays after the branch point (default: as long as the plateau lasted, to the "
                 "scenario's last step)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--last", a->run.confirm.last, "K: compare the mean of the last K steps (default 20, at most half "
                                                "the replayed steps)")
      ->check(CLI::Range(3, 100000));
  sub.add_option("--out", a->run.out, "where the replays go (default RUN_DIR/confirm)");
  sub.add_option("--html", a->html, "also write the run's HTML report with both loss curves");
  a->run.placement.add(sub);
  sub.footer("Exit status: 0 confirmed; 1 not confirmed; 2 ambiguous or nothing to confirm (healthy); 3 the run "
             "cannot be replayed.");
  return [a] { return confirm(*a); };
});

}  // namespace
}  // namespace flatline::cli
