// The plan and the verdict of a confirmation (confirm/confirm.h).
#include "confirm/confirm.h"

#include "core/printable.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "run/causes.h"

namespace flatline {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Point {
  double value = kNaN;
  std::optional<uint64_t> batch;
  double lr = kNaN;
};
using Series = std::map<int64_t, Point>;  // trained step -> value

// Rank 0's training loss per trained step in [from, to] (the mean over ranks it logged, else its own);
// a step trained twice (a restart re-trains the steps after its checkpoint) keeps its last record.
Series loss_series(const std::vector<Record>& rs, const Scenario& s, int64_t from, int64_t to) {
  Series out;
  for (const auto& r : rs) {
    if (r.kind != RecordKind::step) continue;
    const int64_t k = trained_step(r, s);
    if (k < from || k > to) continue;
    Point p;
    p.value = r.loss_avg ? *r.loss_avg : r.loss ? *r.loss : kNaN;
    p.batch = r.batch_hash;
    p.lr = r.lr.value_or(kNaN);
    out[k] = p;
  }
  return out;
}

Series eval_series(const std::vector<Record>& rs, int64_t from, int64_t to) {
  Series out;
  for (const auto& r : rs)
    if (r.kind == RecordKind::eval && r.eval_loss && r.step >= from && r.step <= to) out[r.step].value = *r.eval_loss;
  return out;
}

Series last_n(const Series& s, int n) {
  Series out;
  auto it = s.end();
  for (int i = 0; i < n && it != s.begin(); ++i) {
    --it;
    out.insert(*it);
  }
  return out;
}

// The run resumed from checkpoint `step`: a `resume` event at that step by a new process after an earlier
// one's stream had ended (stream_ended_after, telemetry/record.h: a restart's stop_for_restart, a crash's
// error or stopped). A replay's own start (docs/DESIGN.md §14) carries on from its checkpoint as the first
// process of its stream, so its `resume` opens no ended stream: it is no resume of the run.
bool resumed_at(const std::vector<Record>& rank0, int64_t step) {
  bool ended = false;
  for (const auto& r : rank0) {
    if (r.kind == RecordKind::event && r.name == event::resume && r.step == step && ended) return true;
    ended = stream_ended_after(ended, r);
  }
  return false;
}

SeriesStats stats_of(const std::vector<double>& v, int64_t first, int64_t last) {
  SeriesStats s;
  s.n = static_cast<int>(v.size());
  s.first_step = first;
  s.last_step = last;
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / s.n;
  if (s.n < 2) return s;
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.se = std::sqrt(ss / (s.n - 1) / s.n);
  return s;
}

SeriesStats stats_of(const Series& s) {
  std::vector<double> v;
  for (const auto& [_, p] : s) v.push_back(p.value);
  return stats_of(v, s.empty() ? -1 : s.begin()->first, s.empty() ? -1 : s.rbegin()->first);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool all_finite(const Series& s) {
  return std::all_of(s.begin(), s.end(), [](const auto& kv) { return std::isfinite(kv.second.value); });
}

std::string steps_span(const Series& s) {
  if (s.empty()) return "no step";
  return s.size() == 1 ? fmt::format("step {}", s.begin()->first)
                       : fmt::format("steps {}..{} ({})", s.begin()->first, s.rbegin()->first, s.size());
}

// Does the replay of the run as it was (prefix + control) reproduce the run's records?
Faithfulness check_faithful(const Series& run, const Series& replay, const ConfirmOptions& o) {
  Faithfulness f;
  std::vector<int64_t> only_run, only_replay;
  for (const auto& [k, _] : run)
    if (!replay.count(k)) only_run.push_back(k);
  for (const auto& [k, _] : replay)
    if (!run.count(k)) only_replay.push_back(k);
  if (!only_run.empty() || !only_replay.empty()) {
    f.detail = fmt::format("the run logged {}, the replay as it was {}", steps_span(run), steps_span(replay));
    return f;
  }
  std::vector<double> d;
  for (const auto& [k, a] : run) {
    const Point& b = replay.at(k);
    if (a.batch != b.batch) {
      f.detail = fmt::format("the replay trained another batch at step {} than the run did", k);
      return f;
    }
    ++f.steps;
    f.identical += same_bits(a.value, b.value);
    d.push_back(b.value - a.value);
  }
  if (f.steps == 0) {
    f.faithful = true;
    f.detail = "neither the run nor the replay as it was logged a step in the replayed window (both stopped there)";
    return f;
  }
  if (f.identical == f.steps) {
    f.faithful = true;
    f.detail = fmt::format("reproduces the run: {} of {} steps bit-identical (batches and losses)", f.identical, f.steps);
    return f;
  }
  const SeriesStats st = stats_of(d, run.begin()->first, run.rbegin()->first);
  f.mean_diff = st.mean;
  f.se = std::isfinite(st.se) ? st.se : 0;
  const double run_mean = stats_of(run).mean;
  const double tol = std::max(o.z * f.se, o.min_effect * std::fabs(run_mean));
  f.faithful = std::isfinite(f.mean_diff) && std::fabs(f.mean_diff) <= tol;
  f.detail = fmt::format("{} the run within the noise: {} of {} steps bit-identical, mean difference {:.3g} (s.e. "
                         "{:.2g}, tolerance {:.2g})",
                         f.faithful ? "reproduces" : "does NOT reproduce", f.identical, f.steps, f.mean_diff, f.se, tol);
  return f;
}

}  // namespace

const char* to_string(ReplayStart s) {
  switch (s) {
    case ReplayStart::fresh: return "fresh";
    case ReplayStart::resume: return "resume";
    case ReplayStart::carry_on: return "carry_on";
  }
  return "?";
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::confirmed: return "confirmed";
    case Verdict::not_confirmed: return "not confirmed";
    case Verdict::ambiguous: return "ambiguous";
    case Verdict::nothing_to_confirm: return "nothing to confirm";
  }
  return "?";
}

int exit_code(Verdict v) {
  switch (v) {
    case Verdict::confirmed: return 0;
    case Verdict::not_confirmed: return 1;
    default: return 2;
  }
}

int64_t trained_step(const Record& r, int64_t samples_per_step) {
  if (r.kind == RecordKind::step && r.samples_seen && samples_per_step > 0) return *r.samples_seen / samples_per_step;
  return r.step;
}

int64_t trained_step(const Record& r, const Scenario& s) {
  return trained_step(r, static_cast<int64_t>(s.batch_size) * s.grad_accum);
}

ConfirmPlan plan_confirmation(const Scenario& s, const Diagnosis& d, const std::vector<Record>& rank0,
                              const std::vector<int64_t>& complete_checkpoints, const ConfirmOptions& o,
                              const std::vector<int64_t>& live_checkpoints) {
  ConfirmPlan p;
  p.cause = d.cause;
  p.rank = d.rank;
  if (is_healthy(d.cause)) {
    p.nothing = "the diagnosis is healthy: nothing to confirm";
    return p;
  }
  const Cause* c = find_cause(d.cause);
  if (!has_intervention(d.cause)) {
    p.nothing = !c ? fmt::format("'{}' is not a cause of the cause table: nothing to repair", d.cause)
                : c->kind == CauseKind::fleet
                    ? fmt::format("{} is a fleet finding: it slows steps, it does not flatten the loss, so no repaired "
                                  "loss can confirm it", d.cause)
                : c->kind == CauseKind::verdict
                    ? fmt::format("{} is the triage's verdict that none of the checklist causes is visible: there is no "
                                  "named cause to repair, so nothing to confirm (its evidence says what to log)", d.cause)
                    : fmt::format("'{}' names no cause to repair", d.cause);
    return p;
  }
  p.onset = d.onset_step >= 1 ? d.onset_step : d.detected_step;
  if (p.onset < 1) {
    p.nothing = "the diagnosis gives no onset (nor a detection step): no point to replay from";
    return p;
  }
  if (names_rank(d.cause) && (d.rank < 0 || d.rank >= s.world_size)) {
    p.nothing = fmt::format("{} needs the rank at fault and the diagnosis names {}", d.cause,
                            d.rank < 0 ? std::string("none") : fmt::format("rank {} of {}", d.rank, s.world_size));
    return p;
  }
  p.branch = p.onset - 1;
  if (p.branch >= s.steps) {
    p.nothing = fmt::format("the onset (step {}) is past the scenario's last step ({})", p.onset, s.steps);
    return p;
  }
  const auto end_from = [&](int64_t b) { return std::min(s.steps, b + (o.steps > 0 ? o.steps : s.steps - b)); };
  bool at_branch = false;
  for (const auto* list : {&complete_checkpoints, &live_checkpoints})
    for (int64_t k : *list) {
      if (k >= 1 && k <= p.branch) p.checkpoint = std::max(p.checkpoint, k);
      at_branch |= k == p.branch;
    }
  // No checkpoint at the branch point: the first live one after it that leaves the branches 2K steps.
  int64_t live = -1;
  for (int64_t k : live_checkpoints)
    if (k > p.branch && end_from(k) - k >= 2 * int64_t{o.last} && (live < 0 || k < live)) live = k;
  if (!at_branch && live > 0) p.branch = p.checkpoint = live;
  p.prefix_start = p.checkpoint < 0 ? ReplayStart::fresh
                   : resumed_at(rank0, p.checkpoint) ? ReplayStart::resume
                                                     : ReplayStart::carry_on;
  p.branch_start = p.needs_prefix() ? ReplayStart::carry_on : p.prefix_start;
  p.end = end_from(p.branch);  // as long as the plateau lasted: to the scenario's end, or --steps
  p.compared = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(o.last, p.branch_steps() / 2)));

  // A window that trains batches the run had trained before cannot show a repair in its training loss.
  const Series run = loss_series(rank0, s, 1, p.end);
  std::set<uint64_t> seen;
  for (const auto& [k, pt] : run) {
    if (!pt.batch) continue;
    if (k > p.branch && seen.count(*pt.batch)) p.held_out = true;
    seen.insert(*pt.batch);
  }
  p.repair.cause = d.cause;
  p.repair.rank = names_rank(d.cause) ? d.rank : -1;
  p.repair.from_step = p.onset;
  if (auto it = run.find(p.onset - 1); it != run.end() && std::isfinite(it->second.lr)) p.repair.lr_before = it->second.lr;
  return p;
}

ConfirmResult judge(const Scenario& s, const ConfirmPlan& p, const std::vector<Record>& original,
                    const ReplayRun& prefix, const ReplayRun& control, const ReplayRun& repaired,
                    const ConfirmOptions& o) {
  ConfirmResult r;
  r.plan = p;
  r.prefix = prefix;
  r.control_run = control;
  r.repaired_run = repaired;
  for (ReplayRun* x : {&r.prefix, &r.control_run, &r.repaired_run}) x->rank0.clear();
  if (!p.nothing.empty()) {
    r.verdict = Verdict::nothing_to_confirm;
    r.reason = p.nothing;
    return r;
  }
  r.repair = make_intervention(p.repair, s)->describe();
  auto ambiguous = [&](std::string why) {
    r.verdict = Verdict::ambiguous;
    r.reason = std::move(why);
    return r;
  };
  if (p.needs_prefix() && (!prefix.ran || !prefix.error.empty()))
    return ambiguous("the prefix replay failed before the branch point: " +
                     (prefix.error.empty() ? std::string("it did not run") : prefix.error));
  if (!control.ran) return ambiguous("the control replay did not run");

  // ---- the control reproduces the run --------------------------------------------------------------
  const int64_t from = (p.needs_prefix() ? std::max<int64_t>(p.checkpoint, 0) : p.branch) + 1;
  Series as_was = loss_series(control.rank0, s, p.branch + 1, p.end);
  if (p.needs_prefix())
    for (const auto& [k, pt] : loss_series(prefix.rank0, s, from, p.branch)) as_was[k] = pt;
  r.control = check_faithful(loss_series(original, s, from, p.end), as_was, o);
  if (!r.control.faithful) return ambiguous("the control does not reproduce the run (" + r.control.detail + ")");

  // ---- the compared series -------------------------------------------------------------------------
  Comparison& c = r.comparison;
  Series sc, sr;
  if (p.held_out) {
    c.series = "eval_loss";
    const int64_t eval_from = p.end - p.compared + 1;
    sc = eval_series(control.rank0, eval_from, p.end);
    sr = eval_series(repaired.rank0, eval_from, p.end);
  } else {
    const Series history = loss_series(original, s, 1, p.branch);
    sc = sr = history;
    for (const auto& [k, pt] : loss_series(control.rank0, s, p.branch + 1, p.end)) sc[k] = pt;
    for (const auto& [k, pt] : loss_series(repaired.rank0, s, p.branch + 1, p.end)) sr[k] = pt;
    sc = last_n(sc, p.compared);
    sr = last_n(sr, p.compared);
  }
  c.control = stats_of(sc);
  c.repaired = stats_of(sr);
  const std::string repaired_error = repaired.error.empty() ? "" : " (the repaired replay failed: " + repaired.error + ")";
  if (c.control.n < 3 || c.repaired.n < 3)
    return ambiguous(fmt::format("too few values to compare: the control has {}, the repaired {} (at least 3){}",
                                 c.control.n, c.repaired.n, repaired_error));
  if (!all_finite(sc) || !all_finite(sr)) {
    const bool repaired_finite = all_finite(sr);
    r.verdict = repaired_finite ? Verdict::confirmed : Verdict::not_confirmed;
    r.reason = repaired_finite ? "the control's loss is not finite and the repaired run's is"
                               : "the repaired run's loss is not finite" + repaired_error;
    return r;
  }
  c.paired = sc.size() == sr.size() && std::equal(sc.begin(), sc.end(), sr.begin(), [](const auto& a, const auto& b) {
               return a.first == b.first && a.second.batch == b.second.batch;
             });
  c.difference = c.control.mean - c.repaired.mean;
  if (c.paired) {
    std::vector<double> d;
    for (const auto& [k, pt] : sc) d.push_back(pt.value - sr.at(k).value);
    c.se = stats_of(d, 0, 0).se;
  } else {
    c.se = std::sqrt(c.control.se * c.control.se + c.repaired.se * c.repaired.se);
  }
  c.threshold = std::max(o.z * c.se, o.min_effect * std::fabs(c.control.mean));
  const bool below = c.difference > c.threshold;
  r.verdict = below ? Verdict::confirmed : Verdict::not_confirmed;
  const std::string what = c.series == "loss" ? "loss" : "held-out loss";
  r.reason = below ? fmt::format("the repaired run's {} is {:.4g} below the control's, more than the noise ({:.2g} = "
                                 "max({:g} s.e., {:g}% of the loss))",
                                 what, c.difference, c.threshold, o.z, 100 * o.min_effect)
                   : fmt::format("the repaired run's {} is not below the control's by more than the noise: difference "
                                 "{:.4g}, needed > {:.2g}{}",
                                 what, c.difference, c.threshold, repaired_error);
  return r;
}

namespace {
std::string to_text_unescaped(const ConfirmResult& r) {
  const ConfirmPlan& p = r.plan;
  std::string s = fmt::format("confirm {}: diagnosis {}", r.run_dir, cause_with_rank(p.cause, p.rank, " rank "));
  if (p.onset >= 1) s += fmt::format(", onset step {}", p.onset);
  s += "\n";
  if (r.verdict == Verdict::nothing_to_confirm) return s + "  NOTHING TO CONFIRM: " + r.reason + "\n";
  if (p.needs_prefix())
    s += fmt::format("  replays: from {} the run as it was to step {} ({} steps), then",
                     p.checkpoint < 0 ? std::string("step 0 (no checkpoint before the onset)")
                                      : fmt::format("checkpoint step {}", p.checkpoint),
                     p.branch, p.branch - std::max<int64_t>(p.checkpoint, 0));
  else
    s += fmt::format("  replays: from {},", p.branch == 0             ? std::string("step 0")
                                           : p.branch >= p.onset ? fmt::format("checkpoint step {} (near the finding: the "
                                                                                "repair acts from step {})",
                                                                                p.branch, p.branch + 1)
                                                                  : fmt::format("checkpoint step {}", p.branch));
  s += fmt::format(" control and repaired steps {}..{} ({} steps each; {} replayed, {:.2f}x the plateau of {})\n",
                   p.branch + 1, p.end, p.branch_steps(), p.replayed_steps(),
                   static_cast<double>(p.replayed_steps()) / static_cast<double>(std::max<int64_t>(1, p.plateau_steps())),
                   p.plateau_steps());
  s += "  repair: " + r.repair + "\n";
  if (!r.control.detail.empty()) s += "  control: " + r.control.detail + "\n";
  if (!r.control_run.error.empty()) s += "  control ended with an error (as the run may have): " + r.control_run.error + "\n";
  if (!r.repaired_run.error.empty()) s += "  repaired ended with an error: " + r.repaired_run.error + "\n";
  const Comparison& c = r.comparison;
  if (c.control.n > 0 || c.repaired.n > 0) {
    s += fmt::format("  compared: {}, the last {} values of each{}\n",
                     c.series == "loss" ? "training loss (rank 0 loss_avg)" : "held-out loss (eval after each step)",
                     p.compared, c.paired ? ", paired per step (same steps, same batches)" : ", unpaired");
    auto row = [](const char* name, const SeriesStats& st) {
      return fmt::format("    {:<9} {:.4f} ± {:.4f}  (mean ± s.e. of {} values, steps {}..{})\n", name, st.mean, st.se,
                         st.n, st.first_step, st.last_step);
    };
    s += row("control", c.control) + row("repaired", c.repaired);
    if (std::isfinite(c.difference))
      s += fmt::format("    margin    {:.4f} below the control (s.e. {:.4f}{}), needed > {:.4f}: {:.1f} s.e.\n",
                       c.difference, c.se, c.paired ? ", paired" : "", c.threshold,
                       c.se > 0 ? c.difference / c.se : std::numeric_limits<double>::infinity());
  }
  std::string verdict = to_string(r.verdict);
  std::transform(verdict.begin(), verdict.end(), verdict.begin(), ::toupper);
  s += fmt::format("  {}: {}\n", verdict, r.reason);
  s += fmt::format("  wall time {:.1f} s (prefix {:.1f} s, control {:.1f} s, repaired {:.1f} s)\n", r.wall_s,
                   r.prefix.wall_s, r.control_run.wall_s, r.repaired_run.wall_s);
  return s;
}
}  // namespace

// What reaches a terminal: control characters from the input made printable (core/printable.h).
std::string to_text(const ConfirmResult& r) { return printable(to_text_unescaped(r)); }

namespace {

nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
double num_of(const nlohmann::json& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() || it->is_null() ? kNaN : it->get<double>();
}

nlohmann::json stats_json(const SeriesStats& s) {
  return {{"n", s.n}, {"mean", num(s.mean)}, {"se", num(s.se)}, {"first_step", s.first_step}, {"last_step", s.last_step}};
}
SeriesStats stats_from(const nlohmann::json& j) {
  SeriesStats s;
  s.n = j.value("n", 0);
  s.mean = num_of(j, "mean");
  s.se = num_of(j, "se");
  s.first_step = j.value("first_step", int64_t{-1});
  s.last_step = j.value("last_step", int64_t{-1});
  return s;
}
nlohmann::json replay_json(const ReplayRun& x) {
  return {{"dir", x.dir}, {"ran", x.ran}, {"error", x.error}, {"wall_s", x.wall_s}, {"steps_trained", x.steps_trained}};
}
ReplayRun replay_from(const nlohmann::json& j) {
  ReplayRun x;
  x.dir = j.value("dir", std::string());
  x.ran = j.value("ran", false);
  x.error = j.value("error", std::string());
  x.wall_s = j.value("wall_s", 0.0);
  x.steps_trained = j.value("steps_trained", int64_t{0});
  return x;
}
ReplayStart start_from(const std::string& s) {
  return s == "resume" ? ReplayStart::resume : s == "carry_on" ? ReplayStart::carry_on : ReplayStart::fresh;
}

}  // namespace

std::string to_json(const ConfirmResult& r) {
  const ConfirmPlan& p = r.plan;
  const Comparison& c = r.comparison;
  nlohmann::json j = {
      {"verdict", to_string(r.verdict)},
      {"reason", r.reason},
      {"run_dir", r.run_dir},
      {"plan",
       {{"cause", p.cause}, {"rank", p.rank}, {"onset", p.onset}, {"nothing", p.nothing}, {"checkpoint", p.checkpoint},
        {"prefix_start", to_string(p.prefix_start)}, {"branch", p.branch}, {"branch_start", to_string(p.branch_start)},
        {"end", p.end}, {"compared", p.compared}, {"held_out", p.held_out},
        {"plateau_steps", p.nothing.empty() ? p.plateau_steps() : 0},  // derived: not read back
        {"replayed_steps", p.nothing.empty() ? p.replayed_steps() : 0},
        {"repair", nlohmann::json::parse(to_json(p.repair))}}},
      {"repair", r.repair},
      {"control_reproduces",
       {{"faithful", r.control.faithful}, {"steps", r.control.steps}, {"identical", r.control.identical},
        {"mean_diff", num(r.control.mean_diff)}, {"se", num(r.control.se)}, {"detail", r.control.detail}}},
      {"comparison",
       {{"series", c.series}, {"control", stats_json(c.control)}, {"repaired", stats_json(c.repaired)},
        {"paired", c.paired}, {"difference", num(c.difference)}, {"se", num(c.se)}, {"threshold", num(c.threshold)}}},
      {"replays", {{"prefix", replay_json(r.prefix)}, {"control", replay_json(r.control_run)}, {"repaired", replay_json(r.repaired_run)}}},
      {"wall_s", r.wall_s},
  };
  return j.dump(1);
}

ConfirmResult confirm_from_json(const std::string& text, const std::string& source) {
  ConfirmResult r;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const std::string v = j.at("verdict").get<std::string>();
    bool known = false;
    for (Verdict x : {Verdict::confirmed, Verdict::not_confirmed, Verdict::ambiguous, Verdict::nothing_to_confirm})
      if (v == to_string(x)) r.verdict = x, known = true;
    if (!known) throw std::runtime_error("unknown verdict '" + v + "'");
    r.reason = j.value("reason", std::string());
    r.run_dir = j.value("run_dir", std::string());
    const auto& p = j.at("plan");
    r.plan.cause = p.value("cause", std::string());
    r.plan.rank = p.value("rank", -1);
    r.plan.onset = p.value("onset", int64_t{-1});
    r.plan.nothing = p.value("nothing", std::string());
    r.plan.checkpoint = p.value("checkpoint", int64_t{-1});
    r.plan.prefix_start = start_from(p.value("prefix_start", std::string()));
    r.plan.branch = p.value("branch", int64_t{0});
    r.plan.branch_start = start_from(p.value("branch_start", std::string()));
    r.plan.end = p.value("end", int64_t{0});
    r.plan.compared = p.value("compared", 0);
    r.plan.held_out = p.value("held_out", false);
    if (p.contains("repair")) r.plan.repair = repair_from_json(p.at("repair").dump(), source + ": plan.repair");
    r.repair = j.value("repair", std::string());
    const auto& f = j.at("control_reproduces");
    r.control.faithful = f.value("faithful", false);
    r.control.steps = f.value("steps", int64_t{0});
    r.control.identical = f.value("identical", int64_t{0});
    r.control.mean_diff = num_of(f, "mean_diff");
    r.control.se = num_of(f, "se");
    r.control.detail = f.value("detail", std::string());
    const auto& c = j.at("comparison");
    r.comparison.series = c.value("series", std::string("loss"));
    r.comparison.control = stats_from(c.at("control"));
    r.comparison.repaired = stats_from(c.at("repaired"));
    r.comparison.paired = c.value("paired", false);
    r.comparison.difference = num_of(c, "difference");
    r.comparison.se = num_of(c, "se");
    r.comparison.threshold = num_of(c, "threshold");
    const auto& rp = j.at("replays");
    r.prefix = replay_from(rp.at("prefix"));
    r.control_run = replay_from(rp.at("control"));
    r.repaired_run = replay_from(rp.at("repaired"));
    r.wall_s = j.value("wall_s", 0.0);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not a confirm.json ({})", source, e.what()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("{}: not a confirm.json ({})", source, e.what()));
  }
  return r;
}

}  // namespace flatline
