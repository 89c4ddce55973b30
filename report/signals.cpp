// Series from one run's telemetry (report/signals.h).
#include "report/signals.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace flatline {
namespace {

std::optional<double> field(const Record& r, const std::string& f) {
  if (f == "loss") return r.loss_avg ? r.loss_avg : r.loss;
  if (f == "lr") return r.lr;
  if (f == "grad_norm") return r.grad_norm;
  if (f == "local_grad_norm") return r.local_grad_norm;
  if (f == "loss_scale") return r.loss_scale;
  if (f == "grad_zero_frac") return r.grad_zero_frac;
  if (f == "update_norm") return r.update_norm;
  return std::nullopt;
}

bool is_step(const Record& r) { return r.kind == RecordKind::step; }

}  // namespace

Series step_series(const RunData& run, const std::string& f, int rank) {
  Series s;
  s.name = f;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    if (rank >= 0 && static_cast<int>(r) != rank) continue;
    for (const auto& rec : run.ranks[r])
      if (auto v = is_step(rec) ? field(rec, f) : std::nullopt) {
        s.x.push_back(static_cast<double>(rec.step));
        s.y.push_back(*v);
      }
    if (!s.empty()) break;
  }
  return s;
}

Series eval_loss(const RunData& run) {
  Series s;
  s.name = "eval loss";
  for (const auto& rank : run.ranks) {
    for (const auto& rec : rank)
      if (rec.kind == RecordKind::eval && rec.eval_loss) {
        s.x.push_back(static_cast<double>(rec.step));
        s.y.push_back(*rec.eval_loss);
      }
    if (!s.empty()) break;
  }
  return s;
}

std::vector<Series> local_grad_norms(const RunData& run) {
  std::vector<Series> out;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Series s = step_series(run, "local_grad_norm", static_cast<int>(r));
    s.name = fmt::format("rank {}", r);
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

std::vector<Series> step_vs_time(const RunData& run) {
  std::vector<Series> out;
  Series hb;  // the watchdogs go on beating while a rank hangs: their step shows where it stopped
  hb.name = "heartbeats";
  for (const auto& rank : run.ranks)
    for (const auto& rec : rank)
      if (rec.kind == RecordKind::heartbeat && std::isfinite(rec.t)) {
        hb.x.push_back(rec.t);
        hb.y.push_back(static_cast<double>(rec.step));
      }
  if (!hb.empty()) out.push_back(std::move(hb));
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Series s;
    s.name = fmt::format("rank {}", r);
    for (const auto& rec : run.ranks[r])
      if (is_step(rec) && std::isfinite(rec.t)) {
        s.x.push_back(rec.t);
        s.y.push_back(static_cast<double>(rec.step));
      }
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

Series step_rate(const RunData& run, int bins) {
  Series s;
  s.name = "steps/s";
  if (run.ranks.empty() || bins < 1) return s;
  const auto& recs = run.ranks.front();
  double t_end = 0;
  for (const auto& r : recs)
    if (std::isfinite(r.t)) t_end = std::max(t_end, r.t);
  if (t_end <= 0) return s;
  const double w = t_end / bins;
  size_t i = 0;
  int64_t prev = 0, cur = 0;
  for (int b = 0; b < bins; ++b) {
    const double hi = w * (b + 1);
    for (; i < recs.size() && !(recs[i].t > hi); ++i)
      if (is_step(recs[i]) && std::isfinite(recs[i].t)) cur = recs[i].step;
    s.x.push_back(w * (b + 0.5));
    s.y.push_back(static_cast<double>(std::max<int64_t>(0, cur - prev)) / w);
    prev = cur;
  }
  return s;
}

}  // namespace flatline
