// Small helpers shared by the detectors: finite-value checks, a bounded ring of samples with a
// median, and the number formats used in evidence lines.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/stats.h"

namespace flatline::detail {

inline bool finite(const std::optional<double>& v) { return v && std::isfinite(*v); }
inline bool finite(double v) { return std::isfinite(v); }

// Keeps the last `cap` samples in a circular buffer; median() of what it holds (NaN when empty);
// min() is a cheap lower bound of the median for fast paths (recomputed only when the minimum leaves).
class Ring {
 public:
  explicit Ring(size_t cap) : cap_(cap) {}
  void push(double v) {
    if (!std::isfinite(v)) return;
    if (v_.size() < cap_) {
      v_.push_back(v);
      if (!min_dirty_ && (v_.size() == 1 || v < min_)) min_ = v;
      return;
    }
    const double out = v_[head_];
    v_[head_] = v;
    if (++head_ == cap_) head_ = 0;
    // A value at or below the minimum is the new minimum, whatever left (periodic heartbeats push the
    // very value that leaves: recomputing on each was most of run_not_alive's cost).
    if (min_dirty_) return;
    if (v <= min_) min_ = v;
    else if (out == min_) min_dirty_ = true;
  }
  size_t size() const { return v_.size(); }
  void clear() {
    v_.clear();
    head_ = 0;
    min_dirty_ = false;
  }
  double min() const {
    if (v_.empty()) return std::nan("");
    if (min_dirty_) {
      min_ = *std::min_element(v_.begin(), v_.end());
      min_dirty_ = false;
    }
    return min_;
  }
  double max() const { return v_.empty() ? std::nan("") : *std::max_element(v_.begin(), v_.end()); }
  double median() const {  // core/stats.h
    scratch_.assign(v_.begin(), v_.end());
    return median_in_place(scratch_);
  }

 private:
  size_t cap_, head_ = 0;
  std::vector<double> v_;  // oldest at head_ once full
  mutable std::vector<double> scratch_;
  mutable double min_ = 0;
  mutable bool min_dirty_ = false;
};

// Per-rank state indexed by rank: a vector (ranks are small dense integers), not a std::map; iterates
// present ranks in rank order as (rank, state) pairs, like the map it replaces.
template <class T>
class PerRank {
 public:
  T& operator[](int r) {
    const size_t i = static_cast<size_t>(r);
    if (i >= v_.size()) {
      v_.resize(i + 1);
      has_.resize(i + 1, 0);
    }
    if (!has_[i]) has_[i] = 1, ++n_;
    return v_[i];
  }
  template <class F>
  void for_each(F f) {  // f(rank, state&) for every present rank, in rank order
    for (size_t i = 0; i < v_.size(); ++i)
      if (has_[i]) f(static_cast<int>(i), v_[i]);
  }
  bool empty() const { return n_ == 0; }
  size_t size() const { return n_; }
  class It {
   public:
    It(const PerRank* p, size_t i) : p_(p), i_(i) { skip(); }
    std::pair<int, const T&> operator*() const { return {static_cast<int>(i_), p_->v_[i_]}; }
    It& operator++() {
      ++i_;
      skip();
      return *this;
    }
    bool operator!=(const It& o) const { return i_ != o.i_; }

   private:
    void skip() {
      while (i_ < p_->v_.size() && !p_->has_[i_]) ++i_;
    }
    const PerRank* p_;
    size_t i_;
  };
  It begin() const { return It(this, 0); }
  It end() const { return It(this, v_.size()); }

 private:
  std::vector<T> v_;
  std::vector<char> has_;
  size_t n_ = 0;
};

inline std::string sci(double v) { return v == 0 ? std::string("0") : fmt::format("{:.1e}", v); }
inline std::string num(double v) { return fmt::format("{:.3g}", v); }
// Loss scales: powers of two read best as integers (65536), small ones as 0.0039.
inline std::string scale(double v) {
  return v >= 1 && v < 1e9 && v == std::floor(v) ? fmt::format("{:.0f}", v) : fmt::format("{:.2g}", v);
}
inline std::string secs(double v) { return fmt::format("{:.2f} s", v); }
inline std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }

}  // namespace flatline::detail
