// The end of a drill (report/drill.h): the summary (truth, detector evidence, missed signals, score, and
// with --explain the checklist walk) and the prompt loop that drives a Drill from a stream.
#include <fmt/format.h>

#include <istream>
#include <ostream>
#include <string>

#include "core/printable.h"
#include "run/causes.h"
#include "report/checklist_walk.h"
#include "report/drill.h"

namespace flatline {
namespace {

std::string who(const std::string& cause, int rank) { return cause_with_rank(cause, rank, " on rank "); }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

std::string line(const char* what, int pts, int of, const std::string& note) {
  return fmt::format("  {:<22} {:>3}/{:<3} {}\n", what, pts, of, note);
}

}  // namespace

std::string Drill::summary() {
  settle();
  const DrillScore& s = score_;
  std::string out = "\n=== drill summary ===\n";
  out += fmt::format("your answer: {}\n", s.answered ? who(s.answer_cause, s.answer_rank) : "(none)");
  out += fmt::format("the truth:   {}", who(s.truth_cause, s.truth_rank));
  if (run_.manifest && !run_.manifest->faults.empty()) {
    const FaultTruth& f = run_.manifest->faults.front();
    out += fmt::format(" (mode {}; active from step {}, fully in place at step {})", f.mode, f.active_from,
                       f.onset_step);
  }
  out += fmt::format("\nthe run:     {} ({})\n", run_.name, run_.dir);
  const Diagnosis& d = run_.diagnosis.get();
  if (d.findings.empty()) {
    out += "the detectors: healthy, no cause found\n";
  } else {
    out += fmt::format("the detectors: {} detected at step {} (onset estimated at step {})\n",
                       who(d.cause, d.rank), d.detected_step, d.onset_step);
    for (const auto& f : d.findings)
      for (const auto& e : f.evidence) out += fmt::format("  - [{}] {}\n", evidence_signal(f.cause), e);
  }
  out += "checklist:\n";
  for (size_t i = 0; i < d.checklist.size(); ++i)
    out += fmt::format("  {}. {:<20} {:<10} {}\n", i + 1, d.checklist[i].cause,
                       d.checklist[i].state == CheckState::fail ? "FAIL" : to_string(d.checklist[i].state),
                       d.checklist[i].detail);
  out += fmt::format("signals you read: {} ({})\n", join(s.read), s.read.size());
  out += fmt::format("evidence you missed: {}\n", s.missed.empty() ? "none" : join(s.missed));
  out += fmt::format("scored on: liveness checked before the model; lr and grad norm read before the answer{}\n",
                     s.restarted ? "; the data after the restart (a resumed loader can replay data silently)" : "");
  if (!s.answered) out += fmt::format("score: 0/{} (no answer given)\n", s.max_total);
  if (s.answered) {
    out += "score:\n";
    out += line("cause", s.cause_pts, 50,
                s.cause_right ? (s.rank_right ? "right" : "right cause, wrong rank") : "wrong");
    out += line("liveness checked first", s.alive_pts, 15,
                s.alive_first ? "yes" : "no: read `alive` before any model signal");
    out += line("lr read", s.lr_pts, 10, s.read_lr ? "yes" : "no");
    out += line("grad norm read", s.grad_pts, 10, s.read_grad ? "yes" : "no");
    if (s.restarted)
      out += line("data after the restart", s.data_pts, 10,
                  s.read_data ? "yes" : "no: the job was restarted; read `data` (did the loader resume where it was?)");
    out += line("signals used", s.signals_pts, 10,
                fmt::format("{} signal(s); up to 4 is full marks", s.read.size()));
    out += line("time", s.time_pts, 5, fmt::format("{:.0f} s", s.seconds));
    out += fmt::format("  {:<22} {:>3}/{}\n", "total", s.total, s.max_total);
  }
  if (opt_.explain) out += explain_text(walk_checklist(*run_.summary), d, who(s.truth_cause, s.truth_rank));
  return out;
}

namespace {
// One command line, at most kMaxDrillLineBytes kept: the rest of a longer line is read and dropped, never
// held (a 200 MB line from a pipe was held whole and echoed). False at the end of the input.
constexpr size_t kMaxDrillLineBytes = 4096;
bool read_command(std::istream& in, std::string& cmd, size_t& dropped) {
  cmd.clear();
  dropped = 0;
  std::streambuf* b = in.rdbuf();
  for (;;) {
    const int c = b->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return !cmd.empty() || dropped > 0;
    }
    if (c == '\n') return true;
    if (cmd.size() < kMaxDrillLineBytes) cmd += static_cast<char>(c);
    else ++dropped;
  }
}
}  // namespace

int run_drill(Drill& d, std::istream& in, std::ostream& out, bool echo) {
  out << d.intro() << std::flush;
  std::string cmd;
  size_t dropped = 0;
  while (!d.done()) {
    out << "\ndrill> " << std::flush;
    if (!read_command(in, cmd, dropped)) {
      out << "\n(end of input)\n";
      d.finish();
      break;
    }
    if (dropped) {
      out << fmt::format("(a line of {} bytes: a command is at most {}; ignored)\n", cmd.size() + dropped,
                         kMaxDrillLineBytes)
          << std::flush;
      continue;
    }
    if (echo) out << printable(cmd, /*keep_newlines=*/false) << "\n";
    out << d.handle(cmd) << std::flush;
  }
  if (!d.detectors_ready()) out << "(the detectors are still reading the run; the summary follows)\n" << std::flush;
  out << d.summary() << std::flush;
  return d.score().answered && d.score().cause_right && d.score().rank_right ? 0 : 1;
}

}  // namespace flatline
