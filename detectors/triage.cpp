// Triage (triage.h): one detector per cause in checklist order plus the plateau check; the diagnosis
// is the first cause in checklist order that fired, with every finding listed.
#include "detectors/triage.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "detectors/plateau.h"
#include "core/check.h"
#include "detectors/registry.h"

namespace flatline {

struct Triage::Impl {
  std::vector<std::unique_ptr<Detector>> detectors;  // checklist order, then the extra ones
  std::vector<bool> reported;                        // on_finding already called
  Plateau plateau;
  std::vector<std::function<void(const Finding&)>> callbacks;
  int64_t records = 0, last_step = -1;
  int64_t nonfinite = 0, first_nonfinite_step = -1;
  int first_nonfinite_rank = -1;

  void count(const Record& r) {
    ++records;
    if (r.kind != RecordKind::step) return;
    last_step = std::max(last_step, r.step);
    if ((r.loss && !std::isfinite(*r.loss)) || (r.loss_avg && !std::isfinite(*r.loss_avg))) {
      if (nonfinite++ == 0) first_nonfinite_step = r.step, first_nonfinite_rank = r.rank;
    }
  }

  void announce() {
    for (size_t i = 0; i < detectors.size(); ++i) {
      if (reported[i]) continue;
      auto f = detectors[i]->finding();
      if (!f) continue;
      reported[i] = true;
      for (const auto& cb : callbacks) cb(*f);
    }
  }
};

// One detector per row of the cause table that has one (checklist rows in checklist order, then fleet
// findings). A registered detector without a row, or a row without a detector, is a build mistake.
Triage::Triage(DetectorConfig cfg) : impl_(std::make_unique<Impl>()) {
  for (const Cause& c : cause_table())
    if (c.kind != CauseKind::verdict) impl_->detectors.push_back(make_detector(c.id, cfg));
  for (const auto& id : registered_detectors()) {
    const Cause* c = find_cause(id);
    FLATLINE_CHECK(c && c->kind != CauseKind::verdict,
                   "detector '{}' is registered but has no checklist or fleet row in the cause table "
                   "(detectors/causes.cpp)", id);
  }
  impl_->reported.assign(impl_->detectors.size(), false);
}

Triage::~Triage() = default;

void Triage::observe(const Record& r) {
  impl_->count(r);
  for (auto& d : impl_->detectors) d->observe(r);
  impl_->plateau.observe(r);
  impl_->announce();
}

void Triage::observe_block(const Record* block, size_t n) {
  static const bool parallel = std::thread::hardware_concurrency() > 1;
  auto& im = *impl_;
  for (size_t i = 0; i < n; ++i) im.count(block[i]);
  // One detector at a time over the whole block keeps its per-rank tables in cache.
  auto run = [&](size_t first, size_t last, bool plateau) {
    for (size_t d = first; d < last; ++d) im.detectors[d]->observe_block(block, n);
    if (plateau)
      for (size_t i = 0; i < n; ++i) im.plateau.observe(block[i]);
  };
  // An expensive detector (Detector::expensive) gets the second thread; the rest share the first.
  size_t heavy = im.detectors.size();
  for (size_t i = 0; i < im.detectors.size() && heavy == im.detectors.size(); ++i)
    if (im.detectors[i]->expensive()) heavy = i;
  if (parallel && n >= 4096 && heavy < im.detectors.size()) {
    auto other = std::async(std::launch::async, [&] { run(heavy, heavy + 1, false); });
    run(0, heavy, false);
    run(heavy + 1, im.detectors.size(), true);
    other.get();
  } else {
    run(0, im.detectors.size(), true);
  }
  im.announce();
}

void Triage::advance(double now) {
  for (auto& d : impl_->detectors) d->advance(now);
  impl_->announce();
}

void Triage::finish(double t_end) {
  for (auto& d : impl_->detectors) d->finish(t_end);
  impl_->announce();
}

void Triage::on_finding(std::function<void(const Finding&)> cb) { impl_->callbacks.push_back(std::move(cb)); }

Diagnosis Triage::diagnosis() const {
  Diagnosis d;
  const size_t n_checklist = checklist_causes().size();
  for (size_t i = 0; i < impl_->detectors.size(); ++i) {
    const auto& det = impl_->detectors[i];
    auto f = det->finding();
    CheckResult c = det->check();
    if (f) {
      c.state = CheckState::fail;
      if (!f->evidence.empty()) c.detail = f->evidence.front();
      d.findings.push_back(*f);  // checklist findings first: the first one is the diagnosis
    }
    (i < n_checklist ? d.checklist : d.extra_checks).push_back(std::move(c));
  }
  if (!d.findings.empty()) {
    const Finding& p = d.findings.front();
    d.cause = p.cause;
    d.rank = p.rank;
    d.onset_step = p.onset_step;
    d.detected_step = p.detected_step;
    d.detected_t = p.detected_t;
    d.confidence = p.confidence;
    d.evidence = p.evidence;
  }
  d.plateau = impl_->plateau.status();
  d.records = impl_->records;
  d.last_step = impl_->last_step;
  d.nonfinite_losses = impl_->nonfinite;
  d.first_nonfinite_step = impl_->first_nonfinite_step;
  d.first_nonfinite_rank = impl_->first_nonfinite_rank;
  return d;
}

namespace {

std::string when(const Finding& f) {
  std::string s = fmt::format("onset step {}, detected at step {}", f.onset_step, f.detected_step);
  if (std::isfinite(f.detected_t)) s += fmt::format(" (t = {:.2f} s)", f.detected_t);
  return s;
}

}  // namespace

std::string to_text(const Diagnosis& d) {
  std::string s;
  if (d.findings.empty()) {
    s += "diagnosis: healthy (no cause found)\n";
  } else {
    const Finding& p = d.findings.front();
    s += fmt::format("diagnosis: {}{}  (confidence {:.2f})\n", d.cause,
                     d.rank >= 0 ? fmt::format(" on rank {}", d.rank) : "", d.confidence);
    s += "  " + when(p) + "\n";
    for (const auto& e : d.evidence) s += "  - " + e + "\n";
    for (size_t i = 1; i < d.findings.size(); ++i) {
      const Finding& f = d.findings[i];
      s += fmt::format("  also: {}{}, {}\n", f.cause, f.rank >= 0 ? fmt::format(" on rank {}", f.rank) : "", when(f));
      for (const auto& e : f.evidence) s += "    - " + e + "\n";
    }
  }
  s += "checklist:\n";
  for (size_t i = 0; i < d.checklist.size(); ++i) {
    const CheckResult& c = d.checklist[i];
    const char* state = c.state == CheckState::fail ? "FAIL" : to_string(c.state);
    s += fmt::format("  {}. {:<20} {:<11} {}\n", i + 1, c.cause, state, c.detail);
  }
  for (const CheckResult& c : d.extra_checks) {
    const char* state = c.state == CheckState::fail ? "FAIL" : to_string(c.state);
    s += fmt::format("  +  {:<20} {:<11} {}\n", c.cause, state, c.detail);
  }
  s += "plateau: " + (d.plateau.detail.empty() ? std::string("unknown") : d.plateau.detail) + "\n";
  if (d.nonfinite_losses > 0)
    s += fmt::format("loss: {} step record(s) with a non-finite loss (NaN or inf), the first at step {} on rank {}; "
                     "the plateau check skips them\n",
                     d.nonfinite_losses, d.first_nonfinite_step, d.first_nonfinite_rank);
  s += fmt::format("records: {}, last step {}\n", d.records, d.last_step);
  return s;
}

namespace {

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json to_json_value(const Finding& f) {
  return {{"cause", f.cause},
          {"rank", f.rank},
          {"onset_step", f.onset_step},
          {"detected_step", f.detected_step},
          {"detected_t", number_or_null(f.detected_t)},
          {"confidence", f.confidence},
          {"evidence", f.evidence}};
}

}  // namespace

std::string to_json(const Diagnosis& d) {
  nlohmann::json j;
  j["cause"] = d.cause;
  j["rank"] = d.rank;
  j["onset_step"] = d.onset_step;
  j["detected_step"] = d.detected_step;
  j["detected_t"] = number_or_null(d.detected_t);
  j["confidence"] = d.confidence;
  j["evidence"] = d.evidence;
  j["findings"] = nlohmann::json::array();
  for (const auto& f : d.findings) j["findings"].push_back(to_json_value(f));
  j["checklist"] = nlohmann::json::array();
  for (const auto& c : d.checklist)
    j["checklist"].push_back({{"cause", c.cause}, {"state", to_string(c.state)}, {"detail", c.detail}});
  j["extra_checks"] = nlohmann::json::array();
  for (const auto& c : d.extra_checks)
    j["extra_checks"].push_back({{"cause", c.cause}, {"state", to_string(c.state)}, {"detail", c.detail}});
  j["plateau"] = {{"known", d.plateau.known},
                  {"flat", d.plateau.flat},
                  {"flat_since", d.plateau.flat_since},
                  {"detail", d.plateau.detail}};
  j["records"] = d.records;
  j["last_step"] = d.last_step;
  j["nonfinite_losses"] = {{"count", d.nonfinite_losses},
                           {"first_step", d.first_nonfinite_step},
                           {"first_rank", d.first_nonfinite_rank}};
  return j.dump();
}

}  // namespace flatline
