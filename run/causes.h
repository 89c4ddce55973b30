// The cause table: every answer a diagnosis can give, one row each (docs/DESIGN.md §2 "Causes and the
// checklist"). The five checklist causes come first, in the order an engineer should check them (a dead
// run makes every later signal stale, so liveness is first); then findings beyond the checklist that a
// fleet can show (straggler); then the verdicts the triage gives itself (unexplained_plateau, healthy).
//
// Everything that needs to know the causes reads this table and nothing else: the triage (which
// detectors run, in which order), the scenario loader (allowed `expect.cause`), the scorer (confusion
// matrix rows, which causes name a rank), the HTML report and the drill (the signal that carries a
// cause's evidence). A new cause is one detector file plus one row here.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace flatline {

enum class CauseKind {
  checklist,  // one of the checks walked in order; the first that fires names the diagnosis
  fleet,      // a finding beyond the checklist (it slows a run, it does not flatten the loss); names the
              // diagnosis only when no checklist cause fired
  verdict,    // decided by the triage itself, no detector: healthy, and unexplained_plateau (a flat loss
              // none of the checklist causes explains; scored like a cause: a false alarm on a healthy run)
};

struct Cause {
  const char* id;            // the cause id used in scenarios, manifests, diagnoses and scoreboards
  CauseKind kind;
  bool names_rank;           // the finding names the rank at fault, and scoring checks it where the
                             // truth names one
  const char* drill_signal;  // the drill signal that carries its evidence (report/drill.h); "" none
  const char* summary;       // what is wrong, one line
  const char* first_signal;  // what to read first to see it
};

// All rows: checklist causes in checklist order, then fleet findings, then verdicts.
const std::vector<Cause>& cause_table();
// The row of `id`, or nullptr.
const Cause* find_cause(std::string_view id);
// The checklist causes' ids, in checklist order.
const std::vector<std::string>& checklist_causes();
// Every id of the table, in table order (what `expect.cause` may say).
const std::vector<std::string>& cause_ids();
// True for "healthy" and the empty string (no diagnosis).
bool is_healthy(std::string_view cause);
// Whether the cause's finding names a rank (false for an unknown id).
bool names_rank(std::string_view cause);
// "zero_grad_rank" + rank 3 -> "zero_grad_rank<sep>3" (e.g. sep " rank "); a cause that names no rank,
// or rank < 0, is the id alone.
std::string cause_with_rank(const std::string& cause, int rank, std::string_view sep);
// "a | b | c" of `ids` (for error messages).
std::string join_ids(const std::vector<std::string>& ids, std::string_view sep);

}  // namespace flatline
