// The drill session (report/drill.h): the commands, the signals (report/drill_views.h), the scoring.
#include "report/drill.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <istream>
#include <ostream>
#include <sstream>

#include "run/causes.h"
#include "report/drill_views.h"

namespace flatline {
namespace {

// The causes a trainee may answer: the checklist's and the verdicts (fleet findings are not drilled).
std::vector<std::string> answerable() {
  std::vector<std::string> out;
  for (const Cause& c : cause_table())
    if (c.kind != CauseKind::fleet) out.push_back(c.id);
  return out;
}

const std::string& help_text() {
  static const std::string h = [] {
    std::string s =
        "signals: alive (step vs wall time, heartbeats)  lr  grad (grad norm)  ranks (per-rank local grad norm)\n"
        "         data (batch fingerprints)  scale (loss scale, skipped steps)  eval (eval loss)\n"
        "other:   loss (the loss curve again)  help  quit\n"
        "answer:  answer <cause> [rank]   causes:";
    size_t col = s.size() - s.rfind('\n') - 1;
    const size_t indent = col;
    for (const auto& c : answerable()) {
      if (col + 1 + c.size() > 98) {
        s += "\n" + std::string(indent, ' ');
        col = indent;
      }
      s += " " + c;
      col += 1 + c.size();
    }
    return s + "\n";
  }();
  return h;
}

bool known_cause(const std::string& c) {
  const auto v = answerable();
  return std::find(v.begin(), v.end(), c) != v.end();
}

}  // namespace

const std::vector<std::string>& drill_signals() {
  static const std::vector<std::string> s = {"alive", "lr", "grad", "ranks", "data", "scale", "eval"};
  return s;
}

std::string evidence_signal(const std::string& cause) {
  const Cause* c = find_cause(cause);
  return c ? c->drill_signal : "";
}

Drill::Drill(DrillRun run, std::function<double()> now_s, DrillOptions o)
    : run_(std::move(run)), now_(std::move(now_s)), opt_(o) {
  t0_ = now_();
  if (run_.manifest && !run_.manifest->faults.empty()) {
    const FaultTruth& f = run_.manifest->faults.front();
    score_.truth_cause = f.cause_id();
    score_.truth_rank = f.rank;
  }
  score_.restarted = run_.summary->restarts() > 0;
  score_.max_total = score_.restarted ? 110 : 100;
}

std::string Drill::intro() const {
  const RunSummary& r = *run_.summary;
  std::string s = "flatline drill: " + run_.prompt + "\nFind out why, one signal at a time.\n";
  s += fmt::format("the run: {} ranks, {} steps planned, last logged step {} (its name is hidden)\n", r.world(),
                   run_.manifest ? run_.manifest->steps : 0, r.last_step());
  for (const auto& e : r.events())  // a restart is in the job's own log: the trainee knows of it
    if (e.name == event::resume) s += fmt::format("the job was restarted: resumed {} at t={:.0f} s\n", e.detail, e.t);
  s += "\n" + loss_view(r);
  return s + "\n" + help_text();
}

std::string Drill::handle(const std::string& line) {
  if (done_) return "";
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  std::transform(cmd.begin(), cmd.end(), cmd.begin(), [](unsigned char c) { return std::tolower(c); });
  if (cmd.empty() || cmd[0] == '#') return "";
  if (cmd == "help" || cmd == "?") return help_text();
  if (cmd == "loss") return loss_view(*run_.summary);
  if (cmd == "quit" || cmd == "exit") {
    finish();
    return "";
  }
  if (cmd == "answer") {
    std::string cause, rank_s;
    in >> cause >> rank_s;
    if (!known_cause(cause)) return fmt::format("unknown cause '{}'\n{}", cause, help_text());
    int rank = -1;
    const int world = run_.summary->world();
    if (!rank_s.empty()) {
      try {
        rank = std::stoi(rank_s);
      } catch (const std::exception&) {
        return fmt::format("rank must be a number, not '{}'\n", rank_s);
      }
      if (rank < 0 || rank >= world)
        return fmt::format("rank must be between 0 and {} (this run has {} ranks)\n", world - 1, world);
    }
    answer(cause, rank);
    return "";
  }
  const auto& sigs = drill_signals();
  if (std::find(sigs.begin(), sigs.end(), cmd) == sigs.end())
    return fmt::format("unknown command '{}'; type help\n", cmd);
  if (cmd == "alive" && !touched_model_) score_.alive_first = true;
  if (cmd != "alive") touched_model_ = true;
  if (std::find(score_.read.begin(), score_.read.end(), cmd) == score_.read.end()) score_.read.push_back(cmd);
  score_.read_lr |= cmd == "lr";
  score_.read_grad |= cmd == "grad";
  score_.read_data |= cmd == "data";
  return signal_view(*run_.summary, cmd);
}

void Drill::answer(const std::string& cause, int rank) {
  DrillScore& s = score_;
  s.answered = true;
  s.answer_cause = cause;
  s.answer_rank = rank;
  s.cause_right = cause == s.truth_cause;
  s.rank_right = !(names_rank(s.truth_cause) && s.truth_rank >= 0) || rank == s.truth_rank;
  s.cause_pts = s.cause_right ? (s.rank_right ? 50 : 25) : 0;
  s.alive_pts = s.alive_first ? 15 : 0;
  s.lr_pts = s.read_lr ? 10 : 0;
  s.grad_pts = s.read_grad ? 10 : 0;
  const int n = static_cast<int>(s.read.size());
  s.signals_pts = std::max(0, 10 - 3 * std::max(0, n - 4));
  s.data_pts = s.restarted && s.read_data ? 10 : 0;
  finish();
  s.time_pts = s.seconds <= 120 ? 5 : s.seconds <= 300 ? 3 : 0;
  s.total = s.cause_pts + s.alive_pts + s.lr_pts + s.grad_pts + s.signals_pts + s.time_pts + s.data_pts;
}

void Drill::finish() {
  if (done_) return;
  done_ = true;
  score_.seconds = now_() - t0_;  // the answer's time: waiting for the detectors afterwards does not count
}

// The signals that carried evidence: the truth's, every finding's, and `data` on a run with a restart
// (what rules a replay in or out).
void Drill::settle() {
  if (settled_ || !done_) return;
  settled_ = true;
  std::vector<std::string> bearing;
  auto add = [&](const std::string& sig) {
    if (!sig.empty() && std::find(bearing.begin(), bearing.end(), sig) == bearing.end()) bearing.push_back(sig);
  };
  add(evidence_signal(score_.truth_cause));
  for (const auto& f : run_.diagnosis.get().findings) add(evidence_signal(f.cause));
  if (score_.restarted) add("data");
  for (const auto& sig : drill_signals())  // checklist order
    if (std::find(bearing.begin(), bearing.end(), sig) != bearing.end() &&
        std::find(score_.read.begin(), score_.read.end(), sig) == score_.read.end())
      score_.missed.push_back(sig);
}

const DrillScore& Drill::score() {
  settle();
  return score_;
}

}  // namespace flatline
