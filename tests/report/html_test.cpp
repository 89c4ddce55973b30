// The HTML report on fixture runs: escaping, the plot specs with their onset/detection marks, the
// page (one gnuplot <svg> with data paths per plot, scoreboard, confusion matrix, no external
// resources), and the page rendered by headless Chromium into a screenshot that is not blank.
// gnuplot and chromium are optional here: the tests that need one skip without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "report/html.h"
#include "tests/report/fixtures.h"
#include "tests/report/png.h"

namespace flatline::testing {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

class HtmlReport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = write_fixture_suite(scratch_dir("report"));
    runs_ = new std::vector<RunData>;
    for (const auto& d : find_run_dirs(dir)) runs_->push_back(load_run(d));
    std::filesystem::remove_all(dir);  // everything is in memory now
  }
  static std::vector<RunData>* runs_;
};
std::vector<RunData>* HtmlReport::runs_ = nullptr;

TEST(HtmlEscape, EveryMarkupCharacter) {
  EXPECT_EQ(html_escape("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
  EXPECT_EQ(html_escape("lr = 0 since step 121"), "lr = 0 since step 121");
}

TEST_F(HtmlReport, PlotSpecsCarryTheOnsetAndTheDetection) {
  ASSERT_EQ(runs_->size(), 4u);
  const auto specs = report_plots(runs_->front());  // a-lr-zero: onset 121, detected at 122
  ASSERT_EQ(specs.size(), size_t(kReportPlots));
  EXPECT_EQ(specs[0].title, "loss");
  ASSERT_EQ(specs[0].series.size(), 2u);
  EXPECT_EQ(specs[0].series[1].name, "eval loss");
  EXPECT_EQ(specs[0].series[1].x, (std::vector<double>{50, 100, 150}));
  ASSERT_EQ(specs[0].marks.size(), 2u);
  EXPECT_EQ(specs[0].marks[0].x, 121);
  EXPECT_EQ(specs[0].marks[0].label, "fault onset (step 121)");
  EXPECT_EQ(specs[0].marks[1].x, 122);
  EXPECT_EQ(specs[0].marks[1].label, "detected (step 122)");
  EXPECT_EQ(specs[4].series.size(), 2u);  // one local grad norm per rank
  EXPECT_EQ(specs[5].x_label, "wall time (s)");
  ASSERT_EQ(specs[5].marks.size(), 2u);
  EXPECT_DOUBLE_EQ(specs[5].marks[1].x, runs_->front().diagnosis.detected_t);
  EXPECT_TRUE(report_plots(runs_->back())[0].marks.empty());  // healthy: nothing to mark
}

TEST_F(HtmlReport, SuitePageHasEveryPlotAndNoExternalResources) {
  if (gnuplot_binary().empty()) GTEST_SKIP() << "gnuplot not installed";
  const std::string page = html_report(*runs_, "suite <x>", true);
  EXPECT_EQ(count(page, "<svg"), 4u * kReportPlots);
  EXPECT_EQ(count(page, "</svg>"), 4u * kReportPlots);
  for (size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) {
    const std::string svg = page.substr(at, page.find("</svg>", at) - at);
    EXPECT_NE(svg.find("<path"), std::string::npos) << svg.substr(0, 300);
  }
  EXPECT_EQ(count(page, "fault onset (step 121)"), 10u);  // lr and data runs: the five step plots each
  EXPECT_EQ(count(page, ">detected (step 102)<"), 5u);   // zero_grad_rank run, the five step plots
  EXPECT_NE(page.find("<h2>confusion matrix</h2>"), std::string::npos);
  EXPECT_NE(page.find("accuracy 4/4 (100%), false alarms 0 on 1 healthy run(s)"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"pass\">1</td>"), std::string::npos);
  EXPECT_NE(page.find("healthy &lt;fixture&gt; &amp; &quot;friends&quot;"), std::string::npos);
  EXPECT_EQ(page.find("<fixture>"), std::string::npos);
  EXPECT_NE(page.find("<title>suite &lt;x&gt;</title>"), std::string::npos);
  EXPECT_NE(page.find("[zero_grad_rank] rank 1 local grad norm 0 at steps 101..102"), std::string::npos);
  for (const char* external : {"<script", "<link", "src=", "href=\"http", "url("})
    EXPECT_EQ(page.find(external), std::string::npos) << external;
}

TEST_F(HtmlReport, ChromiumRendersAPageThatIsNotBlank) {
  if (gnuplot_binary().empty()) GTEST_SKIP() << "gnuplot not installed";
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) GTEST_SKIP() << "chromium not installed";
  const std::string dir = scratch_dir("report-shot");
  std::ofstream(dir + "/report.html") << html_report({runs_->front()}, "lr zero", false);
  const std::string cmd = "chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                          "--disable-background-networking --disable-component-update --disable-sync "
                          "--user-data-dir=" + dir + "/profile --screenshot=" + dir + "/shot.png "
                          "--window-size=1200,2400 file://" + dir + "/report.html >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const Image img = read_png(dir + "/shot.png");
  ASSERT_EQ(img.width, 1200u);
  ASSERT_EQ(img.height, 2400u);
  std::set<uint32_t> colours;
  size_t ink = 0, purple = 0, red = 0;
  for (size_t i = 0; i + 2 < img.rgb.size(); i += 3) {
    const int r = img.rgb[i], g = img.rgb[i + 1], b = img.rgb[i + 2];
    colours.insert(uint32_t(r) << 16 | g << 8 | b);
    ink += r + g + b < 600;
    purple += std::abs(r - 0x94) < 24 && g < 40 && std::abs(b - 0xd3) < 24;  // gnuplot's first line colour
    red += std::abs(r - 0xd6) < 24 && std::abs(g - 0x27) < 24 && std::abs(b - 0x28) < 24;  // the onset marks
  }
  EXPECT_GT(colours.size(), 100u);
  EXPECT_GT(ink, 20000u);
  EXPECT_GT(purple, 1000u);
  EXPECT_GT(red, 200u);
  std::filesystem::remove_all(dir);
}

// A confirmed run (flatline confirm's confirm.json and its replays' telemetry beside the run): the
// verdict, the numbers and the loss curves of the control and the repaired, from the branch point on.
TEST(HtmlConfirmation, ShowsItsVerdictNumbersAndBothLossCurves) {
  const std::string parent = scratch_dir("confirmed");
  Spec sp;
  sp.steps = 200;
  const std::string dir = write_run(parent, "lr", "lr-zero", sp, fault("lr_zero", "schedule_total_too_short", -1, 121));
  std::ofstream(dir + "/scenario.yaml") << "name: lr-zero\nbatch_size: 8\nexpect: {cause: lr_zero}\n";
  ConfirmResult r;
  r.verdict = Verdict::confirmed;
  r.reason = "the repaired run's loss is 0.05 below the control's";
  r.repair = "from step 121 an lr below 3e-06 is held at 0.0003";
  r.plan.cause = "lr_zero";
  r.plan.onset = 121;
  r.plan.branch = 120;
  r.plan.end = 200;
  r.plan.compared = 20;
  r.control.faithful = true;
  r.control.detail = "reproduces the run: 200 of 200 steps bit-identical";
  r.comparison.control = {20, 2.65, 0.007, 181, 200};
  r.comparison.repaired = {20, 2.60, 0.007, 181, 200};
  r.comparison.paired = true;
  r.comparison.difference = 0.05;
  r.comparison.se = 0.001;
  r.comparison.threshold = 0.003;
  std::filesystem::create_directories(dir + "/confirm");
  std::ofstream(dir + "/confirm/confirm.json") << to_json(r);
  for (const char* b : {"control", "repaired"}) {  // the branches: rank 0's steps after the branch point
    std::filesystem::create_directories(dir + "/confirm/" + b + "/telemetry");
    JsonlWriter w(dir + "/confirm/" + b + "/telemetry/rank-0.jsonl");
    for (Record rec : read_jsonl(dir + "/telemetry/rank-0.jsonl", nullptr))
      if (rec.kind == RecordKind::step && rec.step > 120) {
        rec.samples_seen = rec.step * 8;
        if (std::string(b) == "repaired") *rec.loss_avg -= 0.05;
        w.write(rec);
      }
  }
  const RunData run = load_run(dir);
  ASSERT_TRUE(run.confirmation) << (run.warnings.empty() ? "" : run.warnings.front());
  EXPECT_EQ(run.confirmation->samples_per_step, 8);
  const auto specs = confirmation_plots(run);
  ASSERT_EQ(specs.size(), 1u);  // the training loss; the held-out one only when that was compared
  ASSERT_EQ(specs[0].series.size(), 2u);  // the run lies under the faithful control
  EXPECT_EQ(specs[0].series[0].name, "control (as the run was)");
  EXPECT_EQ(specs[0].series[1].name, "repaired");
  EXPECT_EQ(specs[0].series[1].x.front(), 121);
  EXPECT_EQ(specs[0].series[1].x.size(), 80u);
  EXPECT_EQ(specs[0].marks[0].x, 120.5);
  EXPECT_EQ(specs[0].marks[0].label, "branch point (after step 120)");
  RunData nothing = run;
  nothing.confirmation->result.verdict = Verdict::nothing_to_confirm;
  EXPECT_TRUE(confirmation_plots(nothing).empty());
  if (gnuplot_binary().empty()) GTEST_SKIP() << "gnuplot not installed";
  const std::string page = html_report({run}, "t", false);
  EXPECT_NE(page.find("confirmation by counterfactual: <span class=\"ok\">confirmed</span>"), std::string::npos);
  EXPECT_NE(page.find("<tr><td>repaired</td><td>2.6000 &plusmn; 0.0070 (20 values, steps 181..200)</td></tr>"),
            std::string::npos);
  EXPECT_NE(page.find("0.0500, s.e. 0.0010 (paired per step); needed &gt; 0.0030"), std::string::npos);
  EXPECT_EQ(count(page, "<svg"), size_t(kReportPlots) + 1);
  std::filesystem::remove_all(parent);
}

}  // namespace
}  // namespace flatline::testing
