// The drill's signal views from a RunSummary (report/drill_views.h).
#include "report/drill_views.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/stats.h"
#include "detectors/lr_zero.h"
#include "detectors/run_not_alive.h"
#include "report/textplot.h"

namespace flatline {
namespace {

using Rank = RunSummary::Rank;

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : fmt::format("{}", v); }

std::string plot(const std::vector<Series>& s, const std::string& title, const std::string& x_label,
                 bool log_y = false) {
  TextPlotOptions o;
  o.title = title;
  o.x_label = x_label;
  o.log_y = log_y;
  return text_plot(s, o);
}

// "a..b" of a per-rank quantity over the ranks that have it (`fmt_one` formats one value).
template <class F, class G>
std::string range(const RunSummary& s, F value, G fmt_one) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& k : s.ranks()) {
    const double v = value(k);
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) return "-";
  return lo == hi ? fmt_one(lo) : fmt_one(lo) + ".." + fmt_one(hi);
}

std::string secs(double v) { return fmt::format("{:.2f}", v); }

bool seen(const Rank& k) { return k.step_records > 0 || k.heartbeats > 0; }

}  // namespace

std::string shorten(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n > 3 ? n - 3 : 0) + "..."; }

std::string rank_list(const std::vector<int>& ranks, size_t at_most) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < at_most; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > at_most) s += fmt::format(" (+{} more)", ranks.size() - at_most);
  return s;
}

std::string group_ranks(const std::vector<std::pair<std::string, int>>& value_rank, int of) {
  std::map<std::string, std::vector<int>> groups;
  for (const auto& [v, r] : value_rank) groups[v].push_back(r);
  std::vector<std::pair<std::string, std::vector<int>>> g(groups.begin(), groups.end());
  std::stable_sort(g.begin(), g.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::string out;
  for (size_t i = 0; i < g.size(); ++i) {
    auto& [v, rs] = g[i];
    std::sort(rs.begin(), rs.end());
    const std::string who = static_cast<int>(rs.size()) == of && of > 1 ? "every rank"
                            : i == 0 && rs.size() > static_cast<size_t>(kOutliers)
                                ? fmt::format("{} ranks", rs.size())
                                : fmt::format("rank{} {}", rs.size() > 1 ? "s" : "", rank_list(rs));
    out += fmt::format("{}{} on {}", i ? "; " : "", v, who);
    if (i + 1 == static_cast<size_t>(kOutliers) && g.size() > i + 1) {
      out += fmt::format("; {} other value(s)", g.size() - i - 1);
      break;
    }
  }
  return out;
}

Series summary_series(const RunSummary& s, const std::string& f) {
  Series out;
  out.name = f;
  double RunSummary::Row::*m = f == "loss"             ? &RunSummary::Row::loss
                               : f == "lr"             ? &RunSummary::Row::lr
                               : f == "grad_norm"      ? &RunSummary::Row::grad_norm
                               : f == "grad_zero_frac" ? &RunSummary::Row::zero_frac
                               : f == "loss_scale"     ? &RunSummary::Row::loss_scale
                               : f == "update_norm"    ? &RunSummary::Row::update_norm
                                                       : nullptr;
  if (!m) return out;
  for (const auto& r : s.rows())
    if (!std::isnan(r.*m)) {
      out.x.push_back(static_cast<double>(r.step));
      out.y.push_back(r.*m);
    }
  return out;
}

std::string loss_view(const RunSummary& s) { return plot({summary_series(s, "loss")}, "training loss", "step"); }

std::string alive_view(const RunSummary& s) {
  Series hb, steps;
  hb.name = "heartbeats";
  for (const auto& [t, step] : s.heartbeat_sample()) hb.x.push_back(t), hb.y.push_back(static_cast<double>(step));
  steps.name = fmt::format("rank {}", s.series_rank());
  for (const auto& r : s.rows())
    if (std::isfinite(r.t)) steps.x.push_back(r.t), steps.y.push_back(static_cast<double>(r.step));
  std::vector<Series> series;
  if (!hb.empty()) series.push_back(hb);
  if (!steps.empty()) series.push_back(steps);
  std::string out = plot(series, "logged step vs wall time", "t (s)") + "\n";
  const auto& ranks = s.ranks();
  std::vector<std::string> ends, stuck;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& k = ranks[r];
    if (k.errors) ends.push_back(fmt::format("rank {}: error at t={:.2f} s{}", r, k.error_t,
                                             k.error_detail.empty() ? "" : ": " + k.error_detail));
    if (std::isfinite(k.run_end_t)) ends.push_back(fmt::format("rank {}: run_end at t={:.2f} s", r, k.run_end_t));
    if (k.stuck_records >= run_not_alive::kStaleRepeats)
      stuck.push_back(fmt::format("rank {}: logged step {} repeated by {} step records (t={:.2f}..{:.2f} s)", r,
                                  k.stuck_step, k.stuck_records, k.stuck_from_t, k.stuck_to_t));
  }
  if (s.world() <= kRowsPerRank) {
    out += fmt::format("{:<5} {:>9} {:>12} {:>12} {:>24} {:>16}\n", "rank", "max step", "reached t", "last step t",
                       "last heartbeat", "longest gap");
    for (size_t r = 0; r < ranks.size(); ++r) {
      const Rank& k = ranks[r];
      const std::string hbs =
          k.heartbeats ? fmt::format("t={:.2f} step {} {}", k.hb_t, k.hb_step, k.hb_phase) : std::string("none");
      const std::string gap = k.gap_before_step >= 0 ? fmt::format("{:.2f} s @{}", k.longest_gap_s, k.gap_before_step) : "-";
      out += fmt::format("{:<5} {:>9} {:>12.2f} {:>12.2f} {:>24} {:>16}\n", r, k.max_step, k.reached_t, k.last_step_t,
                         hbs, gap);
    }
    for (const auto& l : stuck) out += l + "\n";
    for (const auto& l : ends) out += l + "\n";
    return out;
  }
  // A fleet: ranges across ranks, and the ranks that differ.
  std::vector<std::pair<std::string, int>> max_step, phase, hb_step, err, end, stuck_g;
  std::vector<int> silent;
  int n = 0, worst_gap = -1;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& k = ranks[r];
    const int ri = static_cast<int>(r);
    if (!seen(k)) {
      silent.push_back(ri);
      continue;
    }
    ++n;
    max_step.emplace_back(std::to_string(k.max_step), ri);
    phase.emplace_back(k.heartbeats ? k.hb_phase : "no heartbeat", ri);
    hb_step.emplace_back(k.heartbeats ? std::to_string(k.hb_step) : "-", ri);
    err.emplace_back(k.errors ? "\"" + shorten(k.error_detail, 72) + "\"" : "none", ri);
    end.emplace_back(std::isfinite(k.run_end_t) ? "run_end" : "no run_end", ri);
    const bool stuck = k.stuck_records >= run_not_alive::kStaleRepeats;
    stuck_g.emplace_back(stuck ? fmt::format("step {} x{} records", k.stuck_step, k.stuck_records) : "never", ri);
    if (worst_gap < 0 || k.longest_gap_s > ranks[worst_gap].longest_gap_s) worst_gap = ri;
  }
  out += fmt::format("{} of {} ranks wrote telemetry; the run's last record at t={:.2f} s\n", n, s.world(), s.t_end());
  if (!silent.empty()) out += fmt::format("no telemetry at all: ranks {}\n", rank_list(silent));
  out += "max logged step:   " + group_ranks(max_step, n) + "\n";
  out += fmt::format("reached at:        t={} s\n", range(s, [](const Rank& k) { return k.reached_t; }, secs));
  out += fmt::format("last step record:  t={} s\n", range(s, [](const Rank& k) { return k.last_step_t; }, secs));
  if (worst_gap >= 0)
    out += fmt::format("longest gap between step records: {} s (the longest: {:.2f} s before step {} on rank {})\n",
                       range(s, [](const Rank& k) { return k.longest_gap_s; }, secs), ranks[worst_gap].longest_gap_s,
                       ranks[worst_gap].gap_before_step, worst_gap);
  out += fmt::format("last heartbeat:    t={} s\n", range(s, [](const Rank& k) { return k.heartbeats ? k.hb_t : NAN; }, secs));
  out += "  its step:        " + group_ranks(hb_step, n) + "\n";
  out += "  its phase:       " + group_ranks(phase, n) + "\n";
  out += "one logged step repeated (3+ records, t advancing): " + group_ranks(stuck_g, n) + "\n";
  out += "errors:            " + group_ranks(err, n) + "\n";
  if (std::any_of(ranks.begin(), ranks.end(), [](const Rank& k) { return k.errors > 0; }))
    out += fmt::format("  first error at:  t={} s\n", range(s, [](const Rank& k) { return k.errors ? k.error_t : NAN; }, secs));
  out += "end of run:        " + group_ranks(end, n) + "\n";
  return out;
}

std::string lr_view(const RunSummary& s) {
  Series lr = summary_series(s, "lr");
  if (lr.empty()) return "no lr logged\n";
  const size_t pk = std::max_element(lr.y.begin(), lr.y.end()) - lr.y.begin();
  std::string out = plot({lr}, "learning rate", "step") +
                    fmt::format("peak lr {:.3g} at step {}; last lr {:.3g} at step {}\n", lr.y[pk], lr.x[pk],
                                lr.y.back(), lr.x.back());
  // where it stayed below the detector's "zero" (detectors/lr_zero.h: 0.1% of the peak) up to the end
  size_t low = lr.y.size();
  while (low > pk + 1 && lr.y[low - 1] < lr_zero::kLowFrac * lr.y[pk]) --low;
  if (low < lr.y.size())
    out += fmt::format("below {:g}% of the peak from step {} to the end ({} step records)\n", 100 * lr_zero::kLowFrac,
                       lr.x[low], lr.y.size() - low);
  return out;
}

std::string grad_view(const RunSummary& s) {
  Series g = summary_series(s, "grad_norm");
  if (g.empty()) return "no grad_norm logged\n";
  std::string out = plot({g}, "global grad norm (after all-reduce)", "step");
  out += fmt::format("grad norm: first {}, last {} at step {}\n", num(g.y.front()), num(g.y.back()), g.x.back());
  Series z = summary_series(s, "grad_zero_frac");
  if (!z.empty()) out += fmt::format("fraction of zero gradient elements: last {:.3g}\n", z.y.back());
  return out;
}

std::string ranks_view(const RunSummary& s) {
  if (!s.has_local_norm()) return "no local_grad_norm logged (log each rank's gradient norm before the all-reduce)\n";
  Series lo, mean, hi;
  lo.name = "min over ranks", mean.name = "mean", hi.name = "max";
  for (const auto& a : s.across()) {
    if (a.n == 0) continue;
    const double x = static_cast<double>(a.step);
    lo.x.push_back(x), lo.y.push_back(a.min);
    mean.x.push_back(x), mean.y.push_back(a.sum / a.n);
    hi.x.push_back(x), hi.y.push_back(a.max);
  }
  std::string out = plot({hi, mean, lo}, "local grad norm across ranks (before all-reduce)", "step") + "\n";
  const auto& ranks = s.ranks();
  std::vector<double> med(ranks.size(), NAN);
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].norms) med[r] = median(ranks[r].window());
  auto zero_text = [](const Rank& k) {
    if (!k.zero_norms) return std::string("none");
    const bool since = k.last_nonzero_step < k.first_zero_step;
    return fmt::format("{} from step {}{}", k.zero_norms, k.first_zero_step, since ? " (every step since)" : "");
  };
  if (s.world() <= kRowsPerRank) {
    out += fmt::format("{:<5} {:>16} {:>20} {:>11} {:>11}\n", "rank", "median (last 20)", "mean (all)", "zero steps",
                       "first zero");
    for (size_t r = 0; r < ranks.size(); ++r) {
      const Rank& k = ranks[r];
      if (!k.norms) {
        out += fmt::format("{:<5} {:>16}\n", r, "no local_grad_norm logged");
        continue;
      }
      out += fmt::format("{:<5} {:>16} {:>20} {:>11} {:>11}\n", r, num(med[r]), num(k.finite_norms ? k.norm_sum / k.finite_norms : NAN), k.zero_norms,
                         k.zero_norms ? std::to_string(k.first_zero_step) : "-");
    }
    return out;
  }
  const double all = median(med);
  int n = 0;
  std::vector<std::pair<std::string, int>> zeros;
  std::vector<std::pair<double, int>> far;  // |log ratio| to the ranks' median, for ranks off by 2x or more
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].norms) continue;
    ++n;
    zeros.emplace_back(zero_text(ranks[r]), static_cast<int>(r));
    const double ratio = med[r] / all;
    if (all > 0 && !(ratio > 0.5 && ratio < 2)) far.emplace_back(std::isfinite(ratio) && ratio > 0 ? std::fabs(std::log(ratio)) : INFINITY, r);
  }
  std::vector<double> sorted;
  for (double v : med)
    if (!std::isnan(v)) sorted.push_back(v);
  std::sort(sorted.begin(), sorted.end());
  out += fmt::format("median of each rank's last {} local grad norms: {}..{} across {} ranks (median {})\n",
                     RunSummary::kWindow, num(sorted.front()), num(sorted.back()), n, num(all));
  out += "zero steps (local grad norm <= 1e-12): " + group_ranks(zeros, n) + "\n";
  std::sort(far.begin(), far.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (far.empty()) out += "ranks off the median by 2x or more: none\n";
  for (size_t i = 0; i < far.size() && i < static_cast<size_t>(kOutliers); ++i) {
    const int r = far[i].second;
    out += fmt::format("  rank {}: median {} (x{:.2g} of the ranks' median), zero steps {}\n", r, num(med[r]),
                       med[r] / all, zero_text(ranks[r]));
  }
  if (far.size() > static_cast<size_t>(kOutliers)) out += fmt::format("  (+{} more ranks off by 2x)\n", far.size() - kOutliers);
  if (s.has_timing()) {
    std::vector<std::pair<double, int>> c;
    for (size_t r = 0; r < ranks.size(); ++r)
      if (ranks[r].timed) c.emplace_back(ranks[r].compute_ms_sum / ranks[r].timed, static_cast<int>(r));
    std::sort(c.begin(), c.end());
    const double mid = c[c.size() / 2].first;
    out += fmt::format("compute per step (step_ms - comm_ms, mean): {:.1f}..{:.1f} ms (median {:.1f}); slowest: ",
                       c.front().first, c.back().first, mid);
    for (size_t i = 0; i < 3 && i < c.size(); ++i) {
      const auto& [ms, r] = c[c.size() - 1 - i];
      out += fmt::format("{}rank {} {:.1f} ms ({:+.0f}%)", i ? ", " : "", r, ms, 100 * (ms / mid - 1));
    }
    out += "\n";
  }
  return out;
}

std::string data_view(const RunSummary& s) {
  if (!s.has_batch_hash()) return "no batch_hash logged (log a hash of each batch's sample ids)\n";
  const auto& tr = s.tracked();
  std::vector<int> ranks;
  for (const auto& t : tr) ranks.push_back(t.rank);
  std::string out = fmt::format("batch fingerprints (batch_hash per step) of {}\n",
                                static_cast<int>(tr.size()) == s.world()
                                    ? fmt::format("every rank ({})", tr.size())
                                    : fmt::format("{} of {} ranks, spread evenly: {}", tr.size(), s.world(),
                                                  rank_list(ranks, tr.size())));
  // Tracked ranks with the same counts and stretches are printed once.
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (const auto& t : tr) {
    if (!t.hashed) continue;
    std::string sig = fmt::format("{} batches hashed, {} distinct, {} repeat(s) of an earlier step, {} re-run(s) of "
                                  "the same step\n", t.hashed, t.first_seen.size(), t.repeats, t.reruns);
    for (const auto& st : t.first_stretches)
      sig += fmt::format("    steps {}..{} ({} batches) repeat batches first trained at steps {}..{}\n", st.from_step,
                         st.to_step, st.records, st.src_lo, st.src_hi);
    if (t.stretches > static_cast<int64_t>(t.first_stretches.size()))
      sig += fmt::format("    (+{} more stretches of repeats)\n", t.stretches - static_cast<int64_t>(t.first_stretches.size()));
    if (!groups.count(sig)) order.push_back(sig);
    groups[sig].push_back(t.rank);
  }
  for (const auto& sig : order) {
    const auto& rs = groups[sig];
    out += (rs.size() == 1            ? fmt::format("rank {}: ", rs[0])
            : rs.size() == tr.size() ? std::string("every tracked rank: ")
                                     : fmt::format("ranks {}: ", rank_list(rs, rs.size()))) +
           sig;
  }
  // Around each restart: the first batches the resumed processes trained, on the lowest tracked rank.
  std::vector<const RunSummary::Event*> resumes;
  for (const auto& e : s.events())
    if (e.name == event::resume) resumes.push_back(&e);
  if (resumes.empty() || tr.empty()) return out;
  const RunSummary::Tracked& t0 = tr.front();
  for (size_t i = 0; i < resumes.size() && i < t0.after_resume.size(); ++i) {
    out += fmt::format("after the restart (resume {} at t={:.2f} s), rank {}'s next batches:\n", resumes[i]->detail,
                       resumes[i]->t, t0.rank);
    for (const auto& a : t0.after_resume[i])
      out += a.first_step < 0 ? fmt::format("    step {}: batch {:016x}, new\n", a.step, a.hash)
             : a.first_step == a.step
                 ? fmt::format("    step {}: batch {:016x}, the same batch as its first run (a re-run)\n", a.step, a.hash)
                 : fmt::format("    step {}: batch {:016x}, first trained at step {} (a REPEAT)\n", a.step, a.hash,
                               a.first_step);
  }
  return out;
}

std::string scale_view(const RunSummary& s) {
  Series sc = summary_series(s, "loss_scale");
  if (sc.empty()) return "no loss_scale logged\n";
  int64_t overflows = 0, skipped = 0, streak = 0, longest = 0, streak_from = -1, longest_from = -1, longest_to = -1;
  for (const auto& r : s.rows()) {
    overflows += r.overflow == 1;
    if (r.skipped == 1) {
      ++skipped;
      if (streak++ == 0) streak_from = r.step;
      if (streak > longest) longest = streak, longest_from = streak_from, longest_to = r.step;
    } else {
      streak = 0;
    }
  }
  const auto [lo, hi] = std::minmax_element(sc.y.begin(), sc.y.end());
  std::string out = plot({sc}, "loss scale", "step", true) + "\n";
  out += fmt::format("loss scale: first {}, min {}, max {}, last {}\n", num(sc.y.front()), num(*lo), num(*hi),
                     num(sc.y.back()));
  out += fmt::format("overflow steps: {}, skipped steps: {}", overflows, skipped);
  if (longest > 0) out += fmt::format(", longest skip streak {} (steps {}..{})", longest, longest_from, longest_to);
  out += "\n";
  Series zf = summary_series(s, "grad_zero_frac");
  if (!zf.empty()) out += fmt::format("fraction of zero gradient elements at the last step: {}\n", num(zf.y.back()));
  return out;
}

std::string eval_view(const RunSummary& s) {
  const auto& e = s.evals();
  if (e.empty()) return "no eval records (eval not enabled in this run)\n";
  Series ev;
  ev.name = "eval loss";
  for (const auto& [x, y] : e) ev.x.push_back(static_cast<double>(x)), ev.y.push_back(y);
  Series train = summary_series(s, "loss");
  train.name = "training loss";
  std::string out = plot({train, ev}, "train and eval loss", "step") + "\n";
  out += fmt::format("{:>8} {:>10}\n", "step", "eval loss");
  const size_t n = e.size(), stride = (n + 11) / 12;
  for (size_t i = 0; i < n; i += stride) out += fmt::format("{:>8} {:>10.4f}\n", e[i].first, e[i].second);
  if ((n - 1) % stride) out += fmt::format("{:>8} {:>10.4f}\n", e.back().first, e.back().second);
  return out;
}

std::string signal_view(const RunSummary& s, const std::string& sig) {
  if (sig == "alive") return alive_view(s);
  if (sig == "lr") return lr_view(s);
  if (sig == "grad") return grad_view(s);
  if (sig == "ranks") return ranks_view(s);
  if (sig == "data") return data_view(s);
  if (sig == "scale") return scale_view(s);
  if (sig == "eval") return eval_view(s);
  return "";
}

}  // namespace flatline
