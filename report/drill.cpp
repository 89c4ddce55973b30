// The drill session (report/drill.h): signals as text plots and tables, scoring, the summary.
#include "report/drill.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <istream>
#include <ostream>
#include <sstream>

#include "detectors/causes.h"
#include "report/signals.h"
#include "report/textplot.h"

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

std::string plot(const RunData& run, const std::vector<Series>& s, const std::string& title,
                 const std::string& x_label, bool log_y = false) {
  TextPlotOptions o;
  o.title = title;
  o.x_label = x_label;
  o.log_y = log_y;
  return text_plot(s, o);
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

size_t drill_pick(size_t n, uint64_t seed) {
  uint64_t x = seed + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return n ? static_cast<size_t>((x ^ (x >> 31)) % n) : 0;
}

Drill::Drill(RunData run, std::function<double()> now_s) : run_(std::move(run)), now_(std::move(now_s)) {
  t0_ = now_();
  if (run_.manifest && !run_.manifest->faults.empty()) {
    const ManifestFault& f = run_.manifest->faults.front();
    score_.truth_cause = f.cause_id();
    score_.truth_rank = run_.manifest->faults.front().rank;
  }
}

std::string Drill::intro() const {
  int64_t last = -1;
  for (const auto& r : run_.ranks)
    for (const auto& rec : r) last = std::max(last, rec.kind == RecordKind::step ? rec.step : -1);
  std::string s = "flatline drill: a training run went flat. Find out why, one signal at a time.\n";
  s += fmt::format("the run: {} ranks, {} steps planned, last logged step {} (its name is hidden)\n\n",
                   run_.ranks.size(), run_.manifest ? run_.manifest->steps : 0, last);
  s += plot(run_, {step_series(run_, "loss")}, "training loss", "step");
  return s + "\n" + help_text();
}

std::string Drill::show(const std::string& sig) const {
  const RunData& r = run_;
  if (sig == "alive")
    return plot(r, step_vs_time(r), "logged step vs wall time", "t (s)") + "\n" + liveness_table(r);
  if (sig == "lr") {
    Series s = step_series(r, "lr");
    if (s.empty()) return "no lr logged\n";
    const size_t pk = std::max_element(s.y.begin(), s.y.end()) - s.y.begin();
    return plot(r, {s}, "learning rate", "step") +
           fmt::format("peak lr {:.3g} at step {}; last lr {:.3g} at step {}\n", s.y[pk], s.x[pk], s.y.back(),
                       s.x.back());
  }
  if (sig == "grad") {
    Series s = step_series(r, "grad_norm");
    if (s.empty()) return "no grad_norm logged\n";
    std::string out = plot(r, {s}, "global grad norm (after all-reduce)", "step");
    Series z = step_series(r, "grad_zero_frac");
    if (!z.empty()) out += fmt::format("fraction of zero gradient elements: last {:.3g}\n", z.y.back());
    return out;
  }
  if (sig == "ranks") return plot(r, local_grad_norms(r), "local grad norm per rank (before all-reduce)", "step") +
                             "\n" + ranks_table(r);
  if (sig == "data") return "batch fingerprints (batch_hash per step)\n" + data_table(r);
  if (sig == "scale") {
    Series s = step_series(r, "loss_scale");
    return (s.empty() ? "" : plot(r, {s}, "loss scale", "step", true) + "\n") + scale_table(r);
  }
  Series e = eval_loss(r);
  return (e.empty() ? "" : plot(r, {step_series(r, "loss"), e}, "train and eval loss", "step") + "\n") +
         eval_table(r);
}

std::string Drill::handle(const std::string& line) {
  if (done_) return "";
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  std::transform(cmd.begin(), cmd.end(), cmd.begin(), [](unsigned char c) { return std::tolower(c); });
  if (cmd.empty() || cmd[0] == '#') return "";
  if (cmd == "help" || cmd == "?") return help_text();
  if (cmd == "loss") return plot(run_, {step_series(run_, "loss")}, "training loss", "step");
  if (cmd == "quit" || cmd == "exit") {
    finish();
    return "";
  }
  if (cmd == "answer") {
    std::string cause, rank_s;
    in >> cause >> rank_s;
    if (!known_cause(cause)) return fmt::format("unknown cause '{}'\n{}", cause, help_text());
    int rank = -1;
    if (!rank_s.empty()) {
      try {
        rank = std::stoi(rank_s);
      } catch (const std::exception&) {
        return fmt::format("rank must be a number, not '{}'\n", rank_s);
      }
      if (rank < 0 || rank >= static_cast<int>(run_.ranks.size()))
        return fmt::format("rank must be between 0 and {} (this run has {} ranks)\n", run_.ranks.size() - 1,
                           run_.ranks.size());
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
  return show(cmd);
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
  finish();
  s.time_pts = s.seconds <= 120 ? 5 : s.seconds <= 300 ? 3 : 0;
  s.total = s.cause_pts + s.alive_pts + s.lr_pts + s.grad_pts + s.signals_pts + s.time_pts;
}

void Drill::finish() {
  if (done_) return;
  done_ = true;
  score_.seconds = now_() - t0_;
  std::vector<std::string> bearing;  // signals that carried evidence: the truth's and every finding's
  auto add = [&](const std::string& cause) {
    const std::string sig = evidence_signal(cause);
    if (!sig.empty() && std::find(bearing.begin(), bearing.end(), sig) == bearing.end()) bearing.push_back(sig);
  };
  add(score_.truth_cause);
  for (const auto& f : run_.diagnosis.findings) add(f.cause);
  for (const auto& sig : drill_signals())  // checklist order
    if (std::find(bearing.begin(), bearing.end(), sig) != bearing.end() &&
        std::find(score_.read.begin(), score_.read.end(), sig) == score_.read.end())
      score_.missed.push_back(sig);
}

}  // namespace flatline
