// The progress of `flatline run` (cli/progress.h): one line updated in place on a terminal, a plain
// line per tenth of the steps elsewhere; steps/s over the recent window and the ETA.
#include <gtest/gtest.h>

#include <sstream>

#include "cli/progress.h"

namespace flatline {
namespace {

Record step(int rank, int64_t s, double loss) {
  Record r;
  r.rank = rank;
  r.step = s;
  r.loss_avg = loss;
  return r;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(Progress, PlainLinesOncePerTenthWithRateAndEta) {
  std::ostringstream out;
  Progress p(out, /*tty=*/false, 200);
  for (int64_t s = 1; s <= 200; ++s) {
    p.observe(step(1, s, 2.5), 0.1 * static_cast<double>(s));  // 10 steps/s, rank 1 only
    p.observe(step(0, s, 3.0), 0.1 * static_cast<double>(s));  // rank 0's records drive the line
  }
  p.done();
  const std::string o = out.str();
  EXPECT_EQ(count(o, "\n"), 10) << o;
  EXPECT_NE(o.find("  step 20/200  loss 3.000  10.0 steps/s  ETA 18 s\n"), std::string::npos) << o;
  EXPECT_NE(o.find("  step 200/200  loss 3.000  10.0 steps/s\n"), std::string::npos) << o;
  EXPECT_EQ(o.find('\r'), std::string::npos);
}

TEST(Progress, OnATerminalOneLineIsRedrawnInPlaceAndOtherLinesGoAboveIt) {
  std::ostringstream out;
  Progress p(out, /*tty=*/true, 1000);
  for (int64_t s = 1; s <= 100; ++s) {
    p.observe(step(0, s, 2.0), 0.05 * static_cast<double>(s));
    p.tick(0.05 * static_cast<double>(s));
  }
  p.print_line("  [live] something fired");
  p.done();
  const std::string o = out.str();
  EXPECT_GE(count(o, "\r\x1b[K  step "), 20);  // redrawn every 0.2 s over 5 s
  EXPECT_LE(count(o, "\r\x1b[K  step "), 30);
  EXPECT_NE(o.find("\r\x1b[K  [live] something fired\n\r\x1b[K  step 100/1000"), std::string::npos) << o;
  EXPECT_NE(o.find("20.0 steps/s  ETA 45 s"), std::string::npos) << o;
  EXPECT_EQ(o.back(), '\n');
}

TEST(Progress, ARestartThatReRunsStepsRestartsTheRate) {
  std::ostringstream out;
  Progress p(out, false, 100);
  for (int64_t s = 1; s <= 40; ++s) p.observe(step(0, s, 2.0), static_cast<double>(s));
  for (int64_t s = 31; s <= 40; ++s) p.observe(step(0, s, 2.0), 100 + 0.5 * static_cast<double>(s));
  EXPECT_NE(p.text().find("2.0 steps/s"), std::string::npos) << p.text();
}

}  // namespace
}  // namespace flatline
