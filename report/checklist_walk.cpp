// The checklist walked over a RunSummary (report/checklist_walk.h).
#include "report/checklist_walk.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/stats.h"
#include "detectors/loss_scale_collapse.h"
#include "detectors/lr_zero.h"
#include "detectors/run_not_alive.h"
#include "report/drill_views.h"
#include "run/causes.h"

namespace flatline {
namespace {

using Rank = RunSummary::Rank;
// The detectors' own thresholds, applied to the whole run (detectors/<cause>.h).
constexpr double kLowLrFrac = lr_zero::kLowFrac;                      // lr below this fraction of its peak
constexpr int kLowLrRecords = lr_zero::kLowSteps;
constexpr int kStuckWarmup = lr_zero::kStuckWarmupSteps;
constexpr int kStaleRecords = run_not_alive::kStaleRepeats;          // records of one logged step
constexpr double kMinStopS = run_not_alive::kFallbackBound;          // a rank silent this long (and
constexpr double kStopSteps = run_not_alive::kSlackSteps;            // this many steps + 1 heartbeat) stopped
constexpr int kBlindSkipStreak = loss_scale_collapse::kBlindStreak;
constexpr double kUnderflowFrac = loss_scale_collapse::kZeroFrac;     // most gradient elements underflowed

// The high median of the finite values (core/stats.h): one some rank showed; an overflowed norm is no
// typical value.
double finite_median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  return median_high(std::move(v));
}

CheckWalk alive(const RunSummary& s) {
  CheckWalk w;
  std::vector<double> dt;
  const auto& rows = s.rows();
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i].t > rows[i - 1].t) dt.push_back(rows[i].t - rows[i - 1].t);
  if (!(s.t_end() > 0) || dt.empty()) {
    w.showed = "no wall-clock times in the step records";
    w.why = "cannot tell whether the step counter moved in time: log t with each record";
    return w;
  }
  const double step_s = finite_median(dt);
  double hb_s = 1;  // the series rank's heartbeat spacing, from its count over the run
  const Rank& k0 = s.ranks()[static_cast<size_t>(std::max(0, s.series_rank()))];
  if (k0.heartbeats > 1) hb_s = s.t_end() / static_cast<double>(k0.heartbeats);
  const double bound = std::max(kMinStopS, kStopSteps * step_s + hb_s);
  std::vector<std::pair<std::string, int>> err, phase;
  std::vector<int> errors, stopped, stale;
  int n = 0;
  const auto& ranks = s.ranks();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& k = ranks[r];
    if (!k.step_records && !k.heartbeats) continue;
    ++n;
    if (k.errors) errors.push_back(static_cast<int>(r)), err.emplace_back("\"" + shorten(k.error_detail, 60) + "\"", r);
    if (!std::isfinite(k.run_end_t) && s.t_end() - k.last_step_t > bound) {
      stopped.push_back(static_cast<int>(r));
      phase.emplace_back(k.heartbeats ? k.hb_phase : "no heartbeat", static_cast<int>(r));
    }
    if (k.stuck_records >= kStaleRecords) stale.push_back(static_cast<int>(r));
  }
  w.showed = fmt::format("last logged step {}; typical step {:.3g} s; the run's last record at t={:.1f} s", s.last_step(),
                         step_s, s.t_end());
  if (!stopped.empty()) {
    const Rank& k = ranks[stopped.front()];
    w.showed += fmt::format("; rank {}'s last step record at t={:.1f} s ({:.0f} s before the end, heartbeats until "
                            "t={:.1f} s at step {}); {} rank(s) stopped, their last heartbeat's phase: {}",
                            stopped.front(), k.last_step_t, s.t_end() - k.last_step_t, k.hb_t, k.hb_step,
                            stopped.size(), group_ranks(phase, n));
  }
  if (!errors.empty()) w.showed += "; errors: " + group_ranks(err, n);
  if (!stale.empty()) {
    const Rank& k = ranks[stale.front()];
    w.showed += fmt::format("; logged step {} repeated by {} records from t={:.1f} to t={:.1f} s on {} rank(s)",
                            k.stuck_step, k.stuck_records, k.stuck_from_t, k.stuck_to_t, stale.size());
  }
  if (!errors.empty() || !stopped.empty() || !stale.empty()) {
    w.reading = Reading::rules_in;
    w.why = !stale.empty() ? "the logged step stopped moving while records kept coming: the logger shows a stale "
                             "step and loss (whatever the model does, the curve you see is not the run)"
            : !stopped.empty()
                ? fmt::format("step records stopped {:.0f}+ s before the end while the watchdogs' heartbeats went on: "
                              "a hang (every later signal is stale)", bound)
                : "the run ended with errors on its ranks: a collective failed or timed out";
    return w;
  }
  w.reading = Reading::rules_out;
  w.why = fmt::format("every one of the {} ranks logged steps until the end, no logged step repeated, no errors", n);
  return w;
}

CheckWalk lr(const RunSummary& s) {
  CheckWalk w;
  Series v = summary_series(s, "lr");
  if (v.empty()) {
    w.showed = "no lr logged";
    w.why = "cannot tell: log the learning rate (or update_norm and param_norm)";
    return w;
  }
  const size_t pk = std::max_element(v.y.begin(), v.y.end()) - v.y.begin();
  const double peak = v.y[pk];
  w.showed = fmt::format("peak lr {:.3g} at step {}; last lr {:.3g} at step {} ({:.3g}% of the peak)", peak, v.x[pk],
                         v.y.back(), v.x.back(), peak > 0 ? 100 * v.y.back() / peak : 0.0);
  if (peak <= lr_zero::kZeroLr && v.y.size() >= static_cast<size_t>(kStuckWarmup)) {
    w.reading = Reading::rules_in;
    w.why = "lr was 0 at every step: the warmup never advanced (the scheduler is not stepped)";
    return w;
  }
  size_t low = v.y.size();
  while (low > pk + 1 && v.y[low - 1] < kLowLrFrac * peak) --low;
  if (v.y.size() - low >= static_cast<size_t>(kLowLrRecords)) {
    w.reading = Reading::rules_in;
    w.showed += fmt::format("; below {:g}% of the peak from step {}", 100 * kLowLrFrac, v.x[low]);
    w.why = "the lr decayed to (near) zero and stayed there: updates no longer move the model";
    return w;
  }
  w.reading = Reading::rules_out;
  w.why = fmt::format("the lr at the end is at least {:g}% of its peak: the model is still being updated", 100 * kLowLrFrac);
  return w;
}

CheckWalk data(const RunSummary& s) {
  CheckWalk w;
  if (!s.has_batch_hash()) {
    w.showed = "no batch_hash logged";
    w.why = "cannot tell: log a hash of each batch's sample ids";
    return w;
  }
  int64_t hashed = 0, reruns = 0, repeats = 0;
  const RunSummary::Tracked* hit = nullptr;
  int hits = 0;
  for (const auto& t : s.tracked()) {
    hashed += t.hashed, reruns += t.reruns, repeats += t.repeats;
    const bool replay = std::any_of(t.first_stretches.begin(), t.first_stretches.end(),
                                    [](const RunSummary::Stretch& st) { return st.records >= 2; });
    if (replay && !hit) hit = &t;
    hits += replay;
  }
  w.showed = fmt::format("{} batches hashed on {} tracked rank(s), {} re-run(s) of the same step after a restart",
                         hashed, s.tracked().size(), reruns);
  if (hit) {
    const auto& st = hit->first_stretches.front();
    w.showed += fmt::format("; rank {}: steps {}..{} ({} batches) repeat batches first trained at steps {}..{} "
                            "({} of {} tracked ranks replay)",
                            hit->rank, st.from_step, st.to_step, st.records, st.src_lo, st.src_hi, hits,
                            s.tracked().size());
    w.reading = Reading::rules_in;
    w.why = s.restarts() > 0 && st.from_step > 0
                ? "the batches after the restart were trained before: the resumed loader replays data (its sampler "
                  "position was not restored)"
                : "the loader feeds batches it already fed: the data repeats";
    return w;
  }
  w.reading = Reading::rules_out;
  w.why = repeats ? fmt::format("{} isolated repeat(s), never two in a row: one batch coming back can be a hash "
                                "collision or a deliberately re-used batch, a replaying loader repeats run after run",
                                repeats)
          : reruns ? "after the restart each re-run step trained its own batch again (the sampler position was "
                     "restored); no batch of another step came back"
                   : "no batch came back: the data does not repeat";
  return w;
}

CheckWalk scale(const RunSummary& s) {
  CheckWalk w;
  const auto& rows = s.rows();
  bool fp16 = false;
  int64_t streak = 0, longest = 0, longest_to = -1, skipped = 0;
  bool applied = false;
  for (const auto& r : rows) {
    fp16 = fp16 || (std::isfinite(r.loss_scale) && r.loss_scale != 1) || r.overflow == 1;
    if (r.skipped == 1) {
      ++skipped;
      if (applied && ++streak > longest) longest = streak, longest_to = r.step;
    } else {
      streak = 0;
      applied = applied || r.skipped == 0;
    }
  }
  if (rows.empty() || !fp16) {
    w.showed = rows.empty() ? "no step records" : "loss scale 1 throughout, no overflow";
    w.reading = rows.empty() ? Reading::cannot_tell : Reading::rules_out;
    w.why = rows.empty() ? "cannot tell" : "not an fp16 run: there is no dynamic loss scale to collapse";
    return w;
  }
  const RunSummary::Row& last = rows.back();
  w.showed = fmt::format("loss scale at the last step {:.3g}; zero gradient fraction {:.3g}; {} skipped step(s), "
                         "longest streak after the first applied step {}",
                         last.loss_scale, last.zero_frac, skipped, longest);
  const bool underflow = last.loss_scale < 1 && (last.zero_frac > kUnderflowFrac || last.grad_norm == 0);
  if (underflow || longest >= kBlindSkipStreak) {
    w.reading = Reading::rules_in;
    w.why = underflow ? "the scale fell below 1 and the fp16 gradients underflow to 0: updates carry nothing"
                      : fmt::format("{} steps in a row were skipped (to step {}): the scaler halves itself away",
                                    longest, longest_to);
    return w;
  }
  w.reading = Reading::rules_out;
  w.why = "the scale stays usable: overflows are isolated and the gradients survive in fp16";
  return w;
}

CheckWalk ranks(const RunSummary& s) {
  CheckWalk w;
  if (!s.has_local_norm()) {
    w.showed = "no local_grad_norm logged";
    w.why = "cannot tell: log each rank's gradient norm before the all-reduce";
    return w;
  }
  std::vector<double> last;
  int n = 0;
  for (size_t r = 0; r < s.ranks().size(); ++r) {
    const auto win = s.ranks()[r].window();
    if (win.empty()) continue;
    ++n;
    last.push_back(win.back());
    if (win.size() >= 2 && win[win.size() - 1] <= RunSummary::kZeroNorm && win[win.size() - 2] <= RunSummary::kZeroNorm)
      w.ranks.push_back(static_cast<int>(r));
  }
  const double mid = finite_median(last);
  if (n < 2) {
    w.showed = "one rank";
    w.why = "cannot tell: with one rank there is no other rank to compare with";
    return w;
  }
  w.showed = fmt::format("{} ranks; median of their last local grad norms {:.3g}", n, mid);
  if (!w.ranks.empty() && mid > 0) {
    const Rank& k = s.ranks()[w.ranks.front()];
    w.showed += fmt::format("; rank {}: 0 from step {} ({} zero steps){}", w.ranks.front(), k.first_zero_step,
                            k.zero_norms, w.ranks.size() > 1 ? fmt::format(", {} such ranks", w.ranks.size()) : "");
    w.reading = Reading::rules_in;
    w.why = "one rank sends zeros into the all-reduce while the others have gradients: its share of every batch is lost";
    return w;
  }
  w.ranks.clear();
  w.reading = Reading::rules_out;
  w.why = mid > 0 ? "every rank contributes a gradient" : "all ranks are zero together: not one rank's fault (read scale)";
  return w;
}

}  // namespace

const char* to_string(Reading r) {
  switch (r) {
    case Reading::rules_in: return "rules it IN";
    case Reading::rules_out: return "rules it out";
    case Reading::cannot_tell: return "cannot tell";
  }
  return "";
}

std::vector<CheckWalk> walk_checklist(const RunSummary& s) {
  std::vector<CheckWalk> out;
  for (const auto& id : checklist_causes()) {
    CheckWalk w = id == "run_not_alive"         ? alive(s)
                  : id == "lr_zero"             ? lr(s)
                  : id == "data_replay"         ? data(s)
                  : id == "loss_scale_collapse" ? scale(s)
                  : id == "zero_grad_rank"      ? ranks(s)
                                                : CheckWalk{};
    if (w.showed.empty()) w.why = "the drill has no reading of this check; see the detectors' verdict";
    w.cause = id;
    w.signal = find_cause(id)->drill_signal;
    out.push_back(std::move(w));
  }
  return out;
}

std::string walk_verdict(const std::vector<CheckWalk>& w, int* rank) {
  for (const auto& c : w)
    if (c.reading == Reading::rules_in) {
      if (rank) *rank = c.ranks.empty() ? -1 : c.ranks.front();
      return c.cause;
    }
  if (rank) *rank = -1;
  return "healthy";
}

std::string explain_text(const std::vector<CheckWalk>& w, const Diagnosis& d, const std::string& truth) {
  std::string out = "\n=== the checklist on this run (--explain) ===\n";
  for (size_t i = 0; i < w.size(); ++i) {
    const CheckWalk& c = w[i];
    const Cause* row = find_cause(c.cause);
    out += fmt::format("{}. `{}` -> {}: {}\n", i + 1, c.signal, c.cause, row ? row->first_signal : "");
    out += "   on this run: " + c.showed + "\n";
    out += fmt::format("   {}: {}\n", to_string(c.reading), c.why);
    for (const auto& chk : d.checklist)
      if (chk.cause == c.cause)
        out += fmt::format("   the detectors: {}{}\n", chk.state == CheckState::fail ? "FAIL" : to_string(chk.state),
                           chk.detail.empty() ? "" : " (" + chk.detail + ")");
  }
  int rank = -1;
  const std::string v = walk_verdict(w, &rank);
  out += v == "healthy" ? "walk: every check rules its cause out: healthy (the loss is a slowing descent, not a fault)\n"
                        : fmt::format("walk: the first check that rules its cause in names it: {}\n",
                                      cause_with_rank(v, rank, " on rank "));
  out += fmt::format("the detectors: {}; the truth: {}\n", cause_with_rank(d.cause, d.rank, " on rank "), truth);
  if (!d.plateau.detail.empty()) out += "plateau check: " + d.plateau.detail + "\n";
  return out;
}

}  // namespace flatline
