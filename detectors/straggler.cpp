// straggler (a fleet finding, not one of the five checklist causes): one rank computes slower than
// the others, and because the gradient all-reduce waits for the slowest rank every rank's step time
// follows it. Triage reports it after the checklist; it is the diagnosis only when no checklist cause
// fired (a slow run whose loss is fine).
//
// Signal: per step record, compute = step_ms - comm_ms (the time outside the all-reduce) and comm_ms,
//   of every rank at the same step (keyed by the k-th step record of each rank, as RankGate does).
// Window: the current run of consecutive judged steps at which the same rank was the slow one.
// Warm-up: none beyond needing 3 ranks (with 2, "the others" is one rank: the median means nothing).
// Thresholds:
//   a rank is slow at a step when its compute > (1 + k) x the median compute of the others, k = 0.15
//   (healthy per-rank jitter is a few %; the slowest of 1024 healthy ranks is ~+3.5 sigma), AND the
//   others absorb the difference: their median comm_ms exceeds the rank's comm_ms by at least half
//   the compute gap (they waited for it inside the all-reduce).
//   fire when the same rank is slow on 10 consecutive judged steps (with 3, ranks time-sliced on
//   fewer cores than ranks were named on a few steps of scheduler jitter). rank = that rank, onset_step = the
//   first of them, detected_t = the latest t among the ranks' records of that step.
// False-positive guards: a rank that is slow for a few steps (a GC pause, a page fault, the OS
//   scheduler time-slicing more ranks than cores); every rank slow
//   together (a checkpoint step: the median moves with them); a rank with a short step because it
//   skipped its backward (faster, not slower); missing comm_ms (cannot tell waiting from working:
//   cannot run).
#include "detectors/straggler.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <vector>

#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace straggler;  // its thresholds (detectors/straggler.h)
constexpr size_t kMaxPending = 4096; // steps waiting for a missing rank, at most

// The k-th smallest (0-based) of the finite values among v[0..n) and, when `below`, the (k-1)-th too:
// the same values std::nth_element gives, found from a window [hint(1 - width), hint(1 + width)] around
// an estimate (the last step's median): one counting pass over the block, then a selection among the
// few values inside the window; the whole set when the order statistics fall outside it. `width` adapts.
class Selector {
 public:
  // Returns false when fewer than k + 1 values are finite.
  bool select(const double* v, size_t n, size_t k, bool below, double hint, double* kth, double* km1) {
    const double lo = hint * (1 - width_), hi = hint * (1 + width_);
    window_.resize(n);
    size_t c_lo = 0, c_in = 0;
    if (hint > 0 && std::isfinite(hint)) {
      double* w = window_.data();
      for (size_t i = 0; i < n; ++i) {  // NaN: in neither count
        w[c_in] = v[i];
        c_in += (v[i] >= lo) & (v[i] <= hi);
        c_lo += v[i] < lo;
      }
    }
    if (c_in > 0 && c_lo + (below ? 1 : 0) <= k && k < c_lo + c_in) {
      if (c_in * 8 > n && width_ > 1e-6) width_ /= 2;  // more in the window than it takes
      pick(window_.data(), c_in, k - c_lo, below, kth, km1);
      return true;
    }
    if (width_ < 0.5) width_ *= 2;
    size_t m = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(v[i])) window_[m++] = v[i];
    if (k >= m) return false;
    pick(window_.data(), m, k, below, kth, km1);
    return true;
  }

 private:
  static void pick(double* w, size_t m, size_t k, bool below, double* kth, double* km1) {
    std::nth_element(w, w + k, w + m);
    *kth = w[k];
    if (below) *km1 = *std::max_element(w, w + k);
  }
  double width_ = 0.05;
  std::vector<double> window_;
};

// Whether every rank's next step record is step `base` (its ordinal); then each one is counted. Branch-
// free over 64-bit columns, so that it vectorises (out of line: once inlined, GCC 12 no longer does).
__attribute__((noinline)) bool advance_all(size_t n, int64_t base, int64_t* __restrict ordinal) {
  size_t behind = 0;
  for (size_t r = 0; r < n; ++r) behind += ordinal[r] != base;
  if (behind) return false;
  for (size_t r = 0; r < n; ++r) ++ordinal[r];
  return true;
}

// compute = step_ms - comm_ms and comm = comm_ms where both are finite, else NaN (a rank without both
// is not compared); whether any comm_ms was finite.
__attribute__((noinline)) bool split_times(size_t n, const double* __restrict step_ms, const double* __restrict comm_ms,
                                           double* __restrict compute, double* __restrict comm) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  size_t comm_finite = 0;
  for (size_t r = 0; r < n; ++r) {
    const double sm = step_ms[r], cm = comm_ms[r];
    const int64_t c_ok = cm - cm == 0, both = (sm - sm == 0) & c_ok;
    comm_finite += static_cast<size_t>(c_ok);
    compute[r] = both != 0 ? sm - cm : nan;
    comm[r] = both != 0 ? cm : nan;
  }
  return comm_finite > 0;
}

// How many of v[0..n) are finite, and the largest of them (top).
// In four lanes, so that it vectorises (the largest is the same whichever lane holds it).
__attribute__((noinline)) size_t finite_max(size_t n, const double* __restrict v, double* top) {
  constexpr double kLow = -std::numeric_limits<double>::infinity();
  double m[4] = {kLow, kLow, kLow, kLow};
  int64_t finite[4] = {0, 0, 0, 0};
  size_t r = 0;
#ifdef __AVX2__
  __m256d mv = _mm256_set1_pd(kLow);
  __m256i fv = _mm256_setzero_si256();  // minus the count (a true compare is all ones: -1)
  for (; r + 4 <= n; r += 4) {
    const __m256d x = _mm256_loadu_pd(v + r);
    const __m256d ok = _mm256_cmp_pd(_mm256_sub_pd(x, x), _mm256_setzero_pd(), _CMP_EQ_OQ);
    fv = _mm256_add_epi64(fv, _mm256_castpd_si256(ok));
    mv = _mm256_blendv_pd(mv, x, _mm256_and_pd(ok, _mm256_cmp_pd(x, mv, _CMP_GT_OQ)));
  }
  _mm256_storeu_pd(m, mv);
  alignas(32) int64_t f[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(f), fv);
  for (size_t k = 0; k < 4; ++k) finite[k] = -f[k];
#else
  for (; r + 4 <= n; r += 4)
    for (size_t k = 0; k < 4; ++k) {
      const double x = v[r + k];
      const int64_t ok = x - x == 0;
      finite[k] += ok;
      m[k] = (ok & (x > m[k])) != 0 ? x : m[k];
    }
#endif
  for (; r < n; ++r) {
    const int64_t ok = v[r] - v[r] == 0;
    finite[0] += ok;
    m[0] = (ok & (v[r] > m[0])) != 0 ? v[r] : m[0];
  }
  for (size_t k = 1; k < 4; ++k) m[0] = m[k] > m[0] ? m[k] : m[0];
  *top = m[0];
  return static_cast<size_t>(finite[0] + finite[1] + finite[2] + finite[3]);
}

class Straggler final : public BlockDetector {
 public:
  explicit Straggler(const DetectorConfig& c) : cfg_world_(c.world_size) {}
  const char* cause() const override { return "straggler"; }

  void observe_event(const Record&) override {}

  void observe_block(const StepBlock& b) override {
    if (b.rows() == 0 || finding_) return;
    if (b.lockstep && whole_step(b)) return;
    for (size_t i = 0; i < b.rows() && !finding_; ++i) row(b, i);
  }

  std::optional<Finding> finding() const override { return finding_; }

  CheckResult check() const override {
    if (finding_) return {cause(), CheckState::fail, finding_->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    if (world_ < 3) return {cause(), CheckState::pass, "fewer than 3 ranks: not applicable"};
    if (!comm_seen_)
      return {cause(), CheckState::cannot_run, "missing comm_ms: log the time each rank spends in the all-reduce"};
    return {cause(), CheckState::pass,
            fmt::format("{} steps compared across {} ranks, slowest compute at most {:.0f}% above the median",
                        judged_, world_, 100 * worst_)};
  }

 private:
  struct Pending {
    std::vector<double> compute, comm;
    int n = 0;
    int64_t step = 0;
    double t = std::nan("");
  };

  // A block in lockstep that is a whole step of every rank, with nothing pending (the fleet simulator's
  // steps): judged from its columns, without a pending step. False when it is not one (rows go one by
  // one then).
  bool whole_step(const StepBlock& b) {
    const size_t n = b.rows();
    const int w = static_cast<int>(n);
    if (!pending_.empty() || n < 2 || (cfg_world_ > 0 ? cfg_world_ != w : world_ > w)) return false;
    if (ordinal_.size() < n) ordinal_.resize(n, 0);
    if (!advance_all(n, base_, ordinal_.data())) return false;
    any_steps_ = true;
    world_ = w;
    compute_.resize(n), comm_.resize(n);
    if (split_times(n, b.step_ms.data(), b.comm_ms.data(), compute_.data(), comm_.data())) comm_seen_ = true;
    judge(compute_.data(), comm_.data(), n, b.step[n - 1], b.t_max);
    ++base_;
    return true;
  }

  void row(const StepBlock& b, size_t i) {
    const int r = b.rank[i];
    if (r < 0) return;
    if (cfg_world_ > 0 && r >= cfg_world_) return;
    any_steps_ = true;
    world_ = std::max(world_, cfg_world_ > 0 ? cfg_world_ : r + 1);
    if (static_cast<size_t>(r) >= ordinal_.size()) ordinal_.resize(static_cast<size_t>(r) + 1, 0);
    const int64_t k = ordinal_[static_cast<size_t>(r)]++;
    if (k < base_) return;  // already judged (or dropped)
    while (static_cast<int64_t>(pending_.size()) <= k - base_) open_step();
    Pending& p = pending_[static_cast<size_t>(k - base_)];
    if (p.compute.size() < static_cast<size_t>(world_)) {
      p.compute.resize(world_, std::nan(""));
      p.comm.resize(world_, std::nan(""));
    }
    const double sm = b.step_ms[i], cm = b.comm_ms[i], t = b.t[i];
    if (std::isfinite(cm)) comm_seen_ = true;
    if (std::isfinite(sm) && std::isfinite(cm)) {
      p.compute[r] = sm - cm;
      p.comm[r] = cm;
    }
    p.step = b.step[i];
    if (std::isfinite(t)) p.t = std::isfinite(p.t) ? std::max(p.t, t) : t;
    ++p.n;
    while (!pending_.empty() && pending_.front().n >= world_ && world_ >= 2) {
      const Pending& f = pending_.front();
      judge(f.compute.data(), f.comm.data(), f.compute.size(), f.step, f.t);
      close_step();
    }
    while (pending_.size() > kMaxPending) close_step();
  }

  // A step's buffers are reused from a closed step's: no allocation per step at fleet scale.
  void open_step() {
    if (free_.empty()) {
      pending_.emplace_back();
      return;
    }
    pending_.push_back(std::move(free_.back()));
    free_.pop_back();
    Pending& p = pending_.back();
    std::fill(p.compute.begin(), p.compute.end(), std::nan(""));
    std::fill(p.comm.begin(), p.comm.end(), std::nan(""));
    p.n = 0;
    p.step = 0;
    p.t = std::nan("");
  }
  void close_step() {
    free_.push_back(std::move(pending_.front()));
    pending_.pop_front();
    ++base_;
  }

  // One step of w ranks (NaN: a rank without both times): the slowest rank against the median of the
  // others. The slowest holds the largest value, so the others' order statistics below it are those of
  // all the ranks: the median of the others is found without copying them (Selector).
  void judge(const double* compute, const double* comm, size_t w, int64_t step, double t) {
    double top = 0;
    const size_t finite = finite_max(w, compute, &top);
    if (finite == 0) return;
    size_t slow = 0;
    while (!(compute[slow] == top)) ++slow;  // the first rank with the largest compute
    const size_t m = finite - 1;            // the others
    if (m < 2) return;
    ++judged_;
    double med = 0, below = 0;
    sel_.select(compute, w, m / 2, m % 2 == 0, last_med_, &med, &below);
    if (m % 2 == 0) med = (med + below) / 2;
    last_med_ = med;
    if (!(med > 0)) return;
    const double gap = compute[slow] - med;
    worst_ = std::max(worst_, gap / med);
    double med_comm = 0;
    const bool is_slow = gap > kSlowFrac * med && (med_comm = others_median(compute, comm, w, slow),
                                                   med_comm - comm[slow] >= kAbsorbed * gap);
    if (!is_slow || static_cast<int>(slow) != run_rank_) {
      run_rank_ = is_slow ? static_cast<int>(slow) : -1;
      run_n_ = is_slow ? 1 : 0;
      run_first_ = step;
      if (!is_slow) return;
    } else {
      ++run_n_;
    }
    if (run_n_ < kSlowSteps) return;
    Finding f;
    f.cause = cause();
    f.rank = static_cast<int>(slow);
    f.onset_step = run_first_;
    f.detected_step = step;
    f.detected_t = t;
    f.confidence = 0.9;
    f.evidence.push_back(fmt::format("rank {} computes {:.0f} ms per step vs a median of {:.0f} ms for the other {} "
                                     "ranks (+{:.0f}%) on steps {}..{}",
                                     slow, compute[slow], med, m, 100 * gap / med, run_first_, step));
    f.evidence.push_back(fmt::format("the others wait for it in the all-reduce: median comm_ms {:.0f} vs {:.0f} on rank {}",
                                     med_comm, comm[slow], slow));
    finding_ = std::move(f);
  }

  // The median comm_ms of the ranks other than `slow` that have both times.
  double others_median(const double* compute, const double* comm, size_t w, size_t slow) {
    scratch_.clear();
    for (size_t r = 0; r < w; ++r)
      if (r != slow && std::isfinite(compute[r])) scratch_.push_back(comm[r]);
    return median_in_place(scratch_);
  }

  int cfg_world_, world_ = 0;
  std::vector<int64_t> ordinal_;  // step records seen per rank
  std::deque<Pending> pending_;   // ordinals base_, base_ + 1, ...
  std::vector<Pending> free_;     // closed steps' buffers
  int64_t base_ = 0, judged_ = 0;
  std::vector<double> scratch_, compute_, comm_;
  Selector sel_;
  double last_med_ = 0;  // the last step's median compute: where the next one's window is centred
  int run_rank_ = -1, run_n_ = 0;
  int64_t run_first_ = -1;
  double worst_ = 0;
  std::optional<Finding> finding_;
  bool any_steps_ = false, comm_seen_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("straggler", Straggler);

}  // namespace flatline
