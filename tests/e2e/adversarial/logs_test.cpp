// Adversarial: a log someone attached to an issue, and the files of a live job followed with
// `diagnose --follow` (docs/DESIGN.md §9 "Untrusted input"). A path that is no log (FIFO, device,
// /proc file, sparse file, endless line) is refused with its reason in bounded time, never read
// blindly and never passed over in silence; a followed file that is missing or goes is said once; every
// stop of a follow, SIGHUP included, ends with the diagnosis so far; a directory of logs of several
// formats names the ones it did not read.
#include "tests/e2e/adversarial/attack.h"

namespace flatline::attack {
namespace {

std::string logs(const std::string& rel) { return std::string(FLATLINE_SOURCE_DIR) + "/tests/data/logs/" + rel; }

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A Megatron log (a foreign format, read whole) and flatline telemetry (streamed), each made every kind
// of bad file: `diagnose` and `replay` refuse it, naming it; a follow warns once and goes on.
TEST(AdversarialLogs, ALogThatIsNoLogIsRefusedNamingWhy) {
  for (Bad b : every_bad()) {
    const std::string dir = testing::scratch_dir("attack-logs");
    const std::string file = dir + "/train.log";
    fs::copy_file(logs("megatron/healthy.log"), file);
    if (b == Bad::endless_line) {
      // a foreign log line is bounded too: a 20 MB line is cut and said, never held whole per line
      std::ofstream(file, std::ios::app) << std::string(20'000'000, 'x');
      const Ran r = flatline_within("diagnose " + file, 30);
      EXPECT_NE(r.status, 124) << r.out;
      EXPECT_LT(r.seconds, 20);
      fs::remove_all(dir);
      continue;
    }
    make_bad(file, b);
    for (const std::string& cmd : {"diagnose " + file + " --format megatron", "diagnose " + dir + " --format megatron",
                                   "replay " + file + " --format megatron"}) {
      const Ran r = flatline_within(cmd, 30);
      EXPECT_NE(r.status, 0) << name_of(b) << ": " << cmd << "\n" << r.out;
      EXPECT_NE(r.status, 124) << name_of(b) << ": " << cmd << " hung";
      EXPECT_NE(r.out.find(file), std::string::npos) << name_of(b) << ": " << cmd << "\n" << r.out;
      EXPECT_EQ(r.out.find("diagnosis: healthy"), std::string::npos) << name_of(b) << ": " << cmd << "\n" << r.out;
      EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
    }
    fs::remove_all(dir);
  }
}

// Paths the user types may be links, but never to a device or a file of /proc.
TEST(AdversarialLogs, DevicesAndProcFilesAreRefusedEvenWhenNamedOnTheCommandLine) {
  for (const std::string& path : {std::string("/dev/zero"), std::string("/dev/urandom"), std::string("/proc/self/status"),
                                  std::string("/proc/kmsg")}) {
    const Ran r = flatline_within("diagnose " + path + " --format megatron", 15);
    EXPECT_EQ(r.status, 2) << path << "\n" << r.out;
    EXPECT_NE(r.out.find(path + ": "), std::string::npos) << r.out;
    const bool proc = path.rfind("/proc", 0) == 0;
    EXPECT_NE(r.out.find(proc ? "is a file of /proc or /sys" : "is a character device"), std::string::npos) << r.out;
  }
}

TEST(AdversarialLogs, AFollowedFileThatIsMissingOrGoesIsSaidOnceAndSIGHUPEndsWithTheDiagnosis) {
  const std::string dir = testing::scratch_dir("attack-follow");
  const std::string run = dir + "/run";
  fs::copy(logs("flatline/lr_zero"), run, fs::copy_options::recursive);
  const std::string missing = dir + "/not-yet";
  e2e::Background f({"diagnose", missing, "--follow", "--poll", "0.05"}, dir + "/follow-missing.out");
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  f.signal(SIGHUP);
  EXPECT_EQ(f.wait(5), 0) << f.output();
  EXPECT_EQ(count_of(f.output(), missing), 2u) << f.output();  // "following PATH", and the one warning
  EXPECT_NE(f.output().find("warning: " + missing + ": "), std::string::npos) << f.output();

  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(run))
    if (e.is_regular_file() && e.path().extension() == ".jsonl") files.push_back(e.path().string());
  ASSERT_GE(files.size(), 2u);
  e2e::Background g({"diagnose", run, "--follow", "--poll", "0.05"}, dir + "/follow.out");
  for (int i = 0; i < 100 && g.output().find("reading ") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  fs::remove(files[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  g.signal(SIGHUP);
  EXPECT_EQ(g.wait(5), 0) << g.output();
  EXPECT_LT(g.seconds_since_start(), 10);
  const std::string out = g.output();
  EXPECT_EQ(count_of(out, files[0] + ": no longer there (deleted or moved); waiting for it"), 1u) << out;
  EXPECT_NE(out.find("diagnosis: "), std::string::npos) << out;  // the final diagnosis, after SIGHUP
  fs::remove_all(dir);
}

TEST(AdversarialLogs, ADirectoryOfSeveralFormatsNamesTheOnesItDidNotRead) {
  const std::string dir = testing::scratch_dir("attack-mixed");
  fs::copy_file(logs("megatron/healthy.log"), dir + "/train.log");
  fs::copy(logs("hf/healthy"), dir, fs::copy_options::recursive);
  const Ran r = flatline_within("diagnose " + dir, 30);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("warning: " + dir + ": also holds "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not read; --format "), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flatline::attack
