// The order statistics flatline takes of its samples, defined once: the detectors' windows, the scorer's
// latencies and the drill's views mean the same by a median; the checklist walk, which shows a value
// some rank had, takes the high median.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace flatline {

// The median of `v`: the middle value, or the mean of the two middle values of an even count. NaN
// values are left out (a sample that was not there); NaN when nothing is left. Reorders `v` (O(n): no
// sort), so a caller that keeps a scratch buffer allocates nothing.
inline double median_in_place(std::vector<double>& v) {
  const auto end = std::partition(v.begin(), v.end(), [](double x) { return !std::isnan(x); });
  const size_t n = static_cast<size_t>(end - v.begin());
  if (n == 0) return std::nan("");
  const auto mid = v.begin() + static_cast<long>(n / 2);
  std::nth_element(v.begin(), mid, end);
  double m = *mid;
  if (n % 2 == 0) m = (m + *std::max_element(v.begin(), mid)) / 2;
  return m;
}

inline double median(std::vector<double> v) { return median_in_place(v); }

// The high median (Python's statistics.median_high): the middle value, or the larger of the two middle
// values of an even count: always one of the samples (what a rank showed, for a report). NaN values
// are left out; NaN when nothing is left.
inline double median_high(std::vector<double> v) {
  const auto end = std::partition(v.begin(), v.end(), [](double x) { return !std::isnan(x); });
  const size_t n = static_cast<size_t>(end - v.begin());
  if (n == 0) return std::nan("");
  const auto mid = v.begin() + static_cast<long>(n / 2);
  std::nth_element(v.begin(), mid, end);
  return *mid;
}

}  // namespace flatline
