// Peak resident memory of this process, for the benchmarks that report it beside their wall time
// (bench_fleet --full, bench_drill). getrusage(2)'s ru_maxrss: KiB on Linux.
#pragma once
#include <sys/resource.h>

namespace flatline::bench {

inline double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace flatline::bench
