// Adversarial: what flatline writes from untrusted input (docs/DESIGN.md §9 "Untrusted input"): the
// HTML report (a scenario name with markup is text on the page, never markup, in a real browser too),
// a report or an export on a full disk (the old report whole, no "wrote" after a write error), and the
// drill's prompt fed a 200 MB line (dropped, not held or echoed).
#include "tests/e2e/adversarial/attack.h"
#include "tests/e2e/small_disk.h"

namespace flatline::attack {
namespace {

// A name the manifest allows (one path component) that is markup: an element that marks the page
// when it runs.
const std::string kMarkup = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">";
const std::string kEscaped = "&lt;img src=x onerror=&quot;document.body.setAttribute(&#39;data-pwned&#39;,&#39;1&#39;)&quot;&gt;";

TEST(AdversarialReport, MarkupInAScenarioNameIsTextOnThePage) {
  const std::string suite = fresh_suite();
  set_manifest(suite + "/a-lr-zero", "/scenario", kMarkup);
  set_manifest(suite + "/d-healthy", "/scenario", "<script>alert(1)<\\script>");
  const Ran r = flatline_within("report " + suite, 120);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string page = e2e::read_file(suite + "/report.html");
  EXPECT_EQ(page.find("<img src=x"), std::string::npos);
  EXPECT_EQ(page.find("<script>alert"), std::string::npos);
  EXPECT_NE(page.find(kEscaped), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;\\script&gt;"), std::string::npos);
  // In a browser: nothing of it ran.
  if (e2e::run("", "command -v chromium >/dev/null && echo yes; :").out.find("yes") == std::string::npos)
    GTEST_SKIP() << "chromium not installed (scripts/setup.sh --tests installs it)";
  const Ran dom = e2e::run("", "timeout 60 chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=3000 "
                               "--dump-dom file://" + suite + "/report.html 2>/dev/null; :");
  ASSERT_NE(dom.out.find("</html>"), std::string::npos) << dom.out.substr(0, 2000);
  EXPECT_EQ(dom.out.find("data-pwned=\"1\""), std::string::npos) << "the name ran as script";
  fs::remove_all(suite);
}

TEST(AdversarialReport, AFullDiskKeepsTheOldReportWholeAndExportSaysItFailed) {
  const std::string suite = fresh_suite();
  const std::string d = testing::scratch_dir("attack-full");
  struct Cleanup {
    std::string suite, d;
    ~Cleanup() { fs::remove_all(suite), fs::remove_all(d); }  // after the disk is unmounted (below)
  } cleanup{suite, d};
  e2e::SmallDisk disk(d + "/disk", "2m");
  if (!disk.why_not().empty()) GTEST_SKIP() << disk.why_not();
  const std::string html = d + "/disk/report.html";
  std::ofstream(html) << "the old report\n";
  disk.fill(0);
  Ran r = flatline_within("report " + suite + " --html " + html, 120);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("wrote "), std::string::npos) << r.out;
  EXPECT_EQ(e2e::read_file(html), "the old report\n");
  r = flatline_within("export " + suite + "/a-lr-zero --formats tensorboard,megatron --out " + d + "/disk/exported", 60);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("wrote "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/formats/ is incomplete"), std::string::npos) << r.out;
  disk.unfill();
}

TEST(AdversarialReport, TheDrillDropsALineOf200MBAndGoesOn) {
  const std::string suite = fresh_suite();
  const Ran r = flatline_within("drill --seed 2 --from " + suite, 120,
                                "{ head -c 200000000 /dev/zero | tr '\\0' x; printf '\\nalive\\nquit\\n'; }");
  EXPECT_NE(r.status, 124) << r.out.substr(0, 2000);
  EXPECT_LT(r.out.size(), 64u << 10) << "the line was echoed";
  EXPECT_NE(r.out.find("(a line of 200000000 bytes: a command is at most 4096; ignored)"), std::string::npos)
      << r.out.substr(0, 4000);
  EXPECT_NE(r.out.find("drill> alive\n"), std::string::npos) << r.out.substr(0, 4000);  // and the next command is read
  fs::remove_all(suite);
}

}  // namespace
}  // namespace flatline::attack
