// Small helpers shared by the detectors: finite-value checks, a bounded ring of samples with a
// median, and the number formats used in evidence lines.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace flatline::detail {

inline bool finite(const std::optional<double>& v) { return v && std::isfinite(*v); }
inline bool finite(double v) { return std::isfinite(v); }

// Keeps the last `cap` samples; median() of what it holds (NaN when empty).
class Ring {
 public:
  explicit Ring(size_t cap) : cap_(cap) {}
  void push(double v) {
    if (!std::isfinite(v)) return;
    v_.push_back(v);
    if (v_.size() > cap_) v_.pop_front();
  }
  size_t size() const { return v_.size(); }
  void clear() { v_.clear(); }
  double median() const {
    if (v_.empty()) return std::nan("");
    std::vector<double> s(v_.begin(), v_.end());
    auto mid = s.begin() + static_cast<long>(s.size() / 2);
    std::nth_element(s.begin(), mid, s.end());
    double m = *mid;
    if (s.size() % 2 == 0) m = (m + *std::max_element(s.begin(), mid)) / 2;
    return m;
  }

 private:
  size_t cap_;
  std::deque<double> v_;
};

inline double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline std::string sci(double v) { return v == 0 ? std::string("0") : fmt::format("{:.1e}", v); }
inline std::string num(double v) { return fmt::format("{:.3g}", v); }
// Loss scales: powers of two read best as integers (65536), small ones as 0.0039.
inline std::string scale(double v) {
  return v >= 1 && v < 1e9 && v == std::floor(v) ? fmt::format("{:.0f}", v) : fmt::format("{:.2g}", v);
}
inline std::string secs(double v) { return fmt::format("{:.2f} s", v); }
inline std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }

}  // namespace flatline::detail
