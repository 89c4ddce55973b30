// Triage (triage.h): one detector per cause in checklist order plus the plateau check; the diagnosis
// is the first cause in checklist order that fired, with every finding listed.
#include "detectors/triage.h"

#include "core/printable.h"
#include "detectors/util.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "detectors/plateau.h"
#include "core/check.h"
#include "core/json_field.h"
#include "detectors/registry.h"

namespace flatline {

namespace {

constexpr const char* kUnexplained = "unexplained_plateau";
constexpr int kFrozenUpdates = 3;     // applied steps in a row with update_norm ~ 0
constexpr int kFrozenParams = 10;     // ... or an identical param_norm (no update_norm logged)
constexpr double kStill = 1e-9;       // update_norm / param_norm of parameters that do not move
constexpr int kMaxClasses = 1000;     // ln K recognised up to K = 1000

// The plain rows of a block in lockstep for Frozen (row i = rank i): an applied, driven step (lr and the
// grad norm finite and > 0) one step after the rank's last, whose update norm is logged and not still:
// the rank's counts of still steps go back to 0. Branch-free over 64-bit columns, so that it vectorises
// (kept out of line: once inlined, GCC 12 no longer vectorises it). odd[i] = 1 for a row Frozen::row
// must see; returns how many.
__attribute__((noinline)) size_t frozen_plain_rows(size_t n, const uint64_t* __restrict flags,
                                                   const double* __restrict lr, const double* __restrict gn,
                                                   const double* __restrict un, const double* __restrict pn,
                                                   const int64_t* __restrict step, int64_t* __restrict last_step,
                                                   int64_t* __restrict updates, int64_t* __restrict odd) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  size_t n_odd = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = pn[i] > 0 && pn[i] < inf ? pn[i] : 1.0;  // NaN (not logged) compares false: 1
    int64_t ok = (flags[i] & StepBlock::kSkippedValue) == 0;
    ok &= lr[i] > 0;
    ok &= lr[i] < inf;
    ok &= gn[i] > 0;
    ok &= gn[i] < inf;
    ok &= (last_step[i] < 0) | (step[i] > last_step[i]);
    ok &= un[i] - un[i] == 0;  // finite
    ok &= !(un[i] / p < kStill);
    odd[i] = 1 - ok;
    n_odd += static_cast<size_t>(1 - ok);
    last_step[i] = ok != 0 ? step[i] : last_step[i];
    updates[i] = ok != 0 ? 0 : updates[i];
  }
  return n_odd;
}

// Parameters that do not move while lr and the gradients are not zero (triage.h, rule 2).
class Frozen {
 public:
  void observe(const Record& r) {
    if (r.kind != RecordKind::step || r.rank < 0) return;
    const double nan = std::nan("");
    row(r.rank, r.step, r.skipped.value_or(false), r.lr.value_or(nan), r.grad_norm.value_or(nan),
        r.update_norm.value_or(nan), r.param_norm.value_or(nan), r.param_norm.has_value());
  }
  void observe_block(const StepBlock& b) {
    const size_t n = b.rows();
    if (!b.lockstep) {
      for (size_t i = 0; i < n; ++i)
        if (b.rank[i] >= 0)
          row(b.rank[i], b.step[i], b.skipped(i), b.lr[i], b.grad_norm[i], b.update_norm[i], b.param_norm[i],
              b.flags[i] & StepBlock::kParamNorm);
      return;
    }
    grow(n);
    odd_.resize(n);
    size_t odd = frozen_plain_rows(n, b.flags.data(), b.lr.data(), b.grad_norm.data(), b.update_norm.data(),
                                   b.param_norm.data(), b.step.data(), last_step_.data(), updates_.data(), odd_.data());
    for (size_t i = 0; odd && i < n; ++i)
      if (odd_[i]) {
        row(static_cast<int>(i), b.step[i], b.skipped(i), b.lr[i], b.grad_norm[i], b.update_norm[i], b.param_norm[i],
            b.flags[i] & StepBlock::kParamNorm);
        --odd;
      }
  }
  // A step record of rank r (NaN: a value not logged; has_param: a param_norm was, NaN or not).
  void row(int r, int64_t step, bool skipped, double lr, double grad_norm, double update_norm, double param_norm,
           bool has_param) {
    if (skipped) return;
    grow(static_cast<size_t>(r) + 1);
    const size_t k = static_cast<size_t>(r);
    State& s = ranks_[k];
    int64_t& updates = updates_[k];
    int64_t& last_step = last_step_[k];
    const bool driven = std::isfinite(lr) && lr > 0 && std::isfinite(grad_norm) && grad_norm > 0;
    if (!driven || (last_step >= 0 && step <= last_step)) {
      updates = s.params = 0;
      last_step = step;
      s.last_param.reset();
      return;
    }
    last_step = step;
    if (std::isfinite(update_norm)) {
      const double p = std::isfinite(param_norm) && param_norm > 0 ? param_norm : 1.0;
      if (update_norm / p < kStill) {
        if (updates++ == 0) s.first = step;
        if (updates == kFrozenUpdates && !found_) {
          found_ = true;
          onset_ = s.first, detected_ = step;
          evidence_ = fmt::format("update norm {} on {} applied steps since step {} while lr = {:.1e} and grad norm = "
                                  "{:.3g}{}: the optimizer is not updating the model it trains (an optimizer built "
                                  "over parameters a wrapper then replaced: huggingface/accelerate#2665)",
                                  update_norm, updates, s.first, lr, grad_norm,
                                  has_param ? fmt::format(", parameter norm {:.6g}", param_norm) : "");
        }
      } else {
        updates = 0;
      }
      return;
    }
    if (std::isfinite(param_norm)) {
      if (s.last_param && *s.last_param == param_norm) {
        if (s.params++ == 0) s.first = s.prev_step;
        if (s.params + 1 == kFrozenParams && p_evidence_.empty()) {
          p_evidence_ = fmt::format("parameter norm {:.6g} unchanged on {} steps since step {} while lr = {:.1e} and "
                                    "grad norm = {:.3g}: the optimizer is not updating the model it trains",
                                    param_norm, kFrozenParams, s.first, lr, grad_norm);
        }
      } else {
        s.params = 0;
      }
      s.last_param = param_norm;
      s.prev_step = step;
    }
  }
  // The finding, if any: (onset, detected, evidence), from the update norm.
  bool found(int64_t& onset, int64_t& detected, std::string& evidence) const {
    if (!found_) return false;
    onset = onset_, detected = detected_, evidence = evidence_;
    return true;
  }
  // A parameter norm that did not change (no update_norm logged): evidence for a loss that never
  // descended, never a verdict of its own (a norm printed with 3 decimals stands still late in a
  // healthy run).
  const std::string& still_params() const { return p_evidence_; }

 private:
  struct State {
    int params = 0;
    int64_t first = -1, prev_step = -1;
    std::optional<double> last_param;
  };
  void grow(size_t n) {
    if (ranks_.size() >= n) return;
    ranks_.resize(n), updates_.resize(n, 0), last_step_.resize(n, -1);
  }
  std::vector<State> ranks_;
  std::vector<int64_t> updates_, last_step_, odd_;  // per rank (the counts a plain row moves); scratch
  bool found_ = false;
  int64_t onset_ = -1, detected_ = -1;
  std::string evidence_, p_evidence_;
};

// "1.3863 = ln 4" when the loss sits at the entropy of a uniform guess over K classes.
std::string ln_k(const PlateauStatus& p) {
  if (!(p.level > 0.5)) return "";
  const int k = static_cast<int>(std::lround(std::exp(p.level)));
  if (k < 2 || k > kMaxClasses) return "";
  const double tol = std::min(0.02, 0.25 / k);
  if (std::fabs(p.level - std::log(static_cast<double>(k))) > tol || p.level_se > tol) return "";
  return fmt::format("loss {:.4f} = ln {} ({:.4f}): the model predicts uniformly over {} classes (check that the labels "
                     "match the inputs, the last layer and what the loss is fed)",
                     p.level, k, std::log(static_cast<double>(k)), k);
}

// "0.2500 = the mean squared error of predicting 0.5" when an MSE sits at what a constant prediction
// of 0.5 scores on 0/1 targets (both outputs stuck at 0.5: a sigmoid that saturated or never trained).
std::string constant_prediction(const PlateauStatus& p) {
  constexpr double tol = 0.002;
  if (std::fabs(p.level - 0.25) > tol || p.level_se > tol) return "";
  return fmt::format("loss {:.4f} = 0.25, the mean squared error of a constant prediction of 0.5 on 0/1 targets: the "
                     "outputs do not depend on the inputs",
                     p.level);
}

// A thread that runs one job at a time for the Triage: the expensive detectors' pass over a block while
// the calling thread runs the others' (Detector::expensive). Started at the first large block.
class Helper {
 public:
  ~Helper() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> job) {
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    {
      std::lock_guard<std::mutex> l(m_);
      job_ = std::move(job);
      busy_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [this] { return !busy_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [this] { return busy_ || stop_; });
      if (stop_) return;
      l.unlock();
      job_();
      l.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool busy_ = false, stop_ = false;
};

constexpr size_t kHelperRows = 512;  // a block this large splits its detectors over two threads

}  // namespace

struct Triage::Impl {
  Helper helper;
  std::vector<std::unique_ptr<Detector>> detectors;  // checklist order, then the extra ones
  std::vector<bool> reported;                        // on_finding already called
  Plateau plateau;
  Frozen frozen;
  std::vector<std::function<void(const Finding&)>> callbacks;
  int64_t records = 0, last_step = -1;
  int64_t nonfinite = 0, first_nonfinite_step = -1;
  int first_nonfinite_rank = -1;

  StepBlock one, many;  // a record as a block of one; records as blocks (observe_block of Records)

  void count(const Record& r) {
    ++records;
    if (r.kind != RecordKind::step) return;
    last_step = std::max(last_step, r.step);
    if ((r.loss && !std::isfinite(*r.loss)) || (r.loss_avg && !std::isfinite(*r.loss_avg))) {
      if (nonfinite++ == 0) first_nonfinite_step = r.step, first_nonfinite_rank = r.rank;
    }
  }
  // The same over a block's step rows (an absent loss is NaN in its column, so finite-or-absent is the
  // test: a present NaN or inf counts, as above).
  void count(const StepBlock& b) {
    records += static_cast<int64_t>(b.records());
    const size_t n = b.rows();
    int64_t top = last_step;
    if (b.lockstep && n > 0) top = std::max(top, b.step[0]);  // (lockstep: every row at one step)
    else
      for (size_t i = 0; i < n; ++i) top = std::max(top, b.step[i]);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      bad += !std::isfinite(b.loss[i]) & ((b.flags[i] & StepBlock::kLoss) != 0);
      bad += !std::isfinite(b.loss_avg[i]) & ((b.flags[i] & StepBlock::kLossAvg) != 0);
    }
    last_step = top;
    if (bad == 0) return;
    for (size_t i = 0; i < n; ++i) {
      const bool loss_bad = (b.flags[i] & StepBlock::kLoss) && !std::isfinite(b.loss[i]);
      const bool avg_bad = (b.flags[i] & StepBlock::kLossAvg) && !std::isfinite(b.loss_avg[i]);
      if (loss_bad || avg_bad) {
        if (nonfinite++ == 0) first_nonfinite_step = b.step[i], first_nonfinite_rank = b.rank[i];
      }
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
                   "(run/causes.cpp)", id);
  }
  impl_->reported.assign(impl_->detectors.size(), false);
}

Triage::~Triage() = default;

void Triage::observe(const Record& r) {
  if (r.kind == RecordKind::step || r.kind == RecordKind::heartbeat) {
    auto& one = impl_->one;
    one.clear();
    one.append(r);
    one.seal();
    observe_block(one);
    return;
  }
  impl_->count(r);
  for (auto& d : impl_->detectors) d->observe(r);
  impl_->plateau.observe(r);
  impl_->frozen.observe(r);
  impl_->announce();
}

void Triage::observe_block(const StepBlock& b) {
  static const bool parallel = std::thread::hardware_concurrency() > 1;
  auto& im = *impl_;
  im.count(b);
  // One detector at a time over the whole block keeps its per-rank tables in cache. The detectors are
  // independent (each sees the block whole and in order), so at fleet scale the expensive ones run on
  // the helper thread meanwhile; findings are announced once both are done.
  const bool split = parallel && b.rows() >= kHelperRows;
  if (split)
    im.helper.start([&im, &b] {
      for (auto& d : im.detectors)
        if (d->expensive()) d->observe_block(b);
    });
  for (auto& d : im.detectors)
    if (!split || !d->expensive()) d->observe_block(b);
  im.plateau.observe_block(b);
  im.frozen.observe_block(b);
  if (split) im.helper.wait();
  im.announce();
}

void Triage::observe_block(const Record* records, size_t n) {
  in_blocks(records, n, impl_->many, [this](const StepBlock& x) { observe_block(x); },
            [this](const Record& r) { observe(r); });
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
  d.plateau = impl_->plateau.status();
  const bool checklist_fired = !d.findings.empty() && std::find(checklist_causes().begin(), checklist_causes().end(),
                                                                 d.findings.front().cause) != checklist_causes().end();
  int64_t onset = -1, detected = -1;
  std::string frozen;
  const bool is_frozen = impl_->frozen.found(onset, detected, frozen);
  // A loss flat at zero (a solved or memorised task, HF's rounded "loss": 0.0) is no plateau to explain.
  constexpr double kZeroLoss = 1e-4;
  const bool at_zero = d.plateau.known && std::fabs(d.plateau.level) < kZeroLoss;
  // A sparse log is flat "by default" when its few values are noisy: only a pinned loss (spread under 5%
  // of its level) or one at chance level is evidence enough there.
  constexpr double kSparsePinned = 0.05;
  // the loss's chance-level readings, each "" when it is none (formatted once, used below)
  const std::string uniform = ln_k(d.plateau), constant = constant_prediction(d.plateau);
  const bool at_chance = !uniform.empty() || !constant.empty();
  const bool sparse_evidence = !d.plateau.sparse || at_chance ||
                               d.plateau.noise < kSparsePinned * std::fabs(d.plateau.level);
  if (!checklist_fired &&
      (is_frozen || (d.plateau.known && d.plateau.never_descended && !at_zero && sparse_evidence))) {
    // The flat loss is real and none of the five causes explains it (triage.h).
    Finding u;
    u.cause = kUnexplained;
    const bool chance = !is_frozen && at_chance;
    // A loss at chance level is strong evidence by itself; a sparse log is less sure than a full window.
    u.confidence = is_frozen ? 0.8 : chance ? 0.8 : d.plateau.sparse ? 0.45 : 0.6;
    if (is_frozen) {
      u.onset_step = onset, u.detected_step = detected;
      u.evidence.push_back(frozen);
    } else {
      u.onset_step = d.plateau.first_step, u.detected_step = d.plateau.judged_step;
      u.evidence.push_back(fmt::format("the loss never descended: {} (flat from its first value at step {})",
                                       d.plateau.detail, d.plateau.first_step));
    }
    if (!uniform.empty()) u.evidence.push_back(uniform);
    if (!constant.empty()) u.evidence.push_back(constant);
    if (d.plateau.sparse)
      u.evidence.push_back(fmt::format("how sure: a sparse log, {} loss values (a full window is {}): confidence {:.2f}{}",
                                       d.plateau.values, impl_->plateau.window(), u.confidence,
                                       chance ? ", the chance level making up for the few values" : ""));
    if (!is_frozen && !impl_->frozen.still_params().empty()) u.evidence.push_back(impl_->frozen.still_params());
    if (is_frozen && d.plateau.known && d.plateau.never_descended)
      u.evidence.push_back("the loss never descended: " + d.plateau.detail);
    std::string missing;
    for (const auto& c : d.checklist)
      if (c.state == CheckState::cannot_run) missing += (missing.empty() ? "" : "; ") + c.cause + " (" + c.detail + ")";
    u.evidence.push_back(missing.empty() ? "every check of the checklist ran and passed"
                                         : "could not check: " + missing);
    d.findings.insert(d.findings.begin(), std::move(u));
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

namespace {
std::string to_text_unescaped(const Diagnosis& d) {
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
}  // namespace

// What reaches a terminal: control characters from the input made printable (core/printable.h).
std::string to_text(const Diagnosis& d) { return printable(to_text_unescaped(d)); }

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

Diagnosis diagnosis_from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(fmt::format("{}: not JSON (byte {}): expected a diagnosis object", source, e.byte));
  }
  if (!j.is_object()) throw std::runtime_error(source + ": expected a diagnosis object");
  Diagnosis d;
  auto get = [&](const char* name, auto& out) { json_field(j, name, out, source); };
  if (!j.contains("cause")) throw std::runtime_error(source + ": no \"cause\": not a flatline diagnosis");
  get("cause", d.cause);
  get("rank", d.rank);
  get("onset_step", d.onset_step);
  get("detected_step", d.detected_step);
  get("detected_t", d.detected_t);
  get("confidence", d.confidence);
  get("evidence", d.evidence);
  get("records", d.records);
  get("last_step", d.last_step);
  if (auto it = j.find("plateau"); it != j.end() && it->is_object()) {
    d.plateau.known = it->value("known", false);
    d.plateau.flat = it->value("flat", false);
    d.plateau.flat_since = it->value("flat_since", int64_t{-1});
    d.plateau.detail = it->value("detail", std::string());
  }
  return d;
}

}  // namespace flatline
