// Adversarial: a recorded corpus or run directory someone handed over (docs/DESIGN.md §9 "Untrusted
// input"). A name in it never becomes a path outside it, flatline deletes nothing it did not make, a
// file that is not a recorded file is refused with its reason in bounded time, and a corpus re-hashed
// after the tampering (the id is an integrity check, not a signature) changes none of that.
#include "tests/e2e/adversarial/attack.h"

namespace flatline::attack {
namespace {

const std::string kCat = " --detector cat='cat >/dev/null'";

// A directory outside the suite that an attack aims at: it must come out as it went in.
struct Victim {
  std::string dir = testing::scratch_dir("victim");
  Victim() { std::ofstream(dir + "/keep.txt") << "not flatline's\n"; }
  ~Victim() { fs::remove_all(dir); }
};

// "../../../<victim>" from a run directory: what cli/reenact.cpp once joined and then deleted.
std::string traversal_to(const std::string& run, const std::string& target) {
  std::string up;
  for (auto p = fs::path(run); p.has_relative_path(); p = p.parent_path()) up += "../";
  return up + fs::path(target).relative_path().string();
}

TEST(AdversarialCorpus, AScenarioNameThatClimbsOutIsRefusedAndNothingIsDeleted) {
  Victim v;
  const auto before = snapshot(v.dir);
  for (bool corpus : {false, true}) {
    const std::string suite = fresh_suite(corpus);
    const std::string run = suite + "/a-lr-zero";
    for (const std::string& name : {traversal_to(run, v.dir), std::string(".."), std::string("."), v.dir}) {
      set_manifest(run, "/scenario", name);
      if (corpus) rehash(suite);
      const Ran r = flatline_within("score " + (corpus ? suite : run) + kCat);
      EXPECT_EQ(r.status, 2) << name << "\n" << r.out;
      EXPECT_NE(r.out.find("bad manifest field 'scenario'"), std::string::npos) << r.out;
      EXPECT_EQ(snapshot(v.dir), before) << "the victim changed after scenario '" << name << "'";
      EXPECT_TRUE(fs::exists(run + "/telemetry/rank-0.jsonl"));
    }
    fs::remove_all(suite);
  }
}

TEST(AdversarialCorpus, RunNamesAndFileNamesStayInsideTheCorpus) {
  Victim v;
  const std::string suite = fresh_suite(true);
  const json original = json::parse(std::ifstream(suite + "/corpus.json"));
  struct Case {
    std::string pointer, value, said;
  };
  const std::vector<Case> cases = {
      {"/runs/0/name", "../" + fs::path(v.dir).filename().string(), "run name '../"},
      {"/runs/0/name", "..", "run name '..': is not a name"},
      {"/runs/0/name", v.dir, "holds a '/' (a name is one path component)"},
      {"/runs/0/name", "a\x1b]52;c;aGk=\x07", "run name 'a?]52;c;aGk=?': holds a control character"},
  };
  for (const Case& c : cases) {
    json j = original;
    j[json::json_pointer(c.pointer)] = c.value;
    std::ofstream(suite + "/corpus.json") << j.dump();
    const Ran r = flatline_within("score " + suite + kCat);
    EXPECT_EQ(r.status, 2) << c.value << "\n" << r.out;
    EXPECT_NE(r.out.find(c.said), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
  }
  // A file of a run that names a path outside it.
  for (const std::string& f : {std::string("../../etc/passwd"), std::string("/etc/passwd")}) {
    json j = original;
    j["runs"][0]["files"][f] = "00000000000000000000000000000000";
    std::ofstream(suite + "/corpus.json") << j.dump();
    const Ran r = flatline_within("score " + suite);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("file '" + f + "' is not a path inside the run"), std::string::npos) << r.out;
  }
  fs::remove_all(suite);
}

// Every command that reads a recorded run, on every kind of file that is not a recorded file: refused,
// naming the file and why, well inside the limit (a FIFO once blocked `score` for 13 minutes, deaf to
// SIGTERM; a sparse file made it allocate 4.6 GB).
TEST(AdversarialCorpus, ATelemetryFileThatIsNoRecordedFileIsRefusedByEveryCommand) {
  for (Bad b : every_bad()) {
    const std::string suite = fresh_suite();
    const std::string run = suite + "/b-zero-grad-rank";
    const std::string file = run + "/telemetry/rank-0.jsonl";
    make_bad(file, b);
    for (const std::string& cmd : {"score " + run + kCat, "score " + run, "diagnose " + run, "report " + run,
                                   "drill --from " + run + " --answers " + suite + "/answers.txt", "replay " + run + " --speed 1000"}) {
      const Ran r = flatline_within(cmd, 30);
      EXPECT_NE(r.status, 0) << name_of(b) << ": " << cmd << "\n" << r.out;
      EXPECT_NE(r.status, 124) << name_of(b) << ": " << cmd << " hung";
      EXPECT_NE(r.out.find(file), std::string::npos) << name_of(b) << ": " << cmd << "\n" << r.out;
      EXPECT_NE(r.out.find(reason_of(b)), std::string::npos) << name_of(b) << ": " << cmd << "\n" << r.out;
      EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
      EXPECT_LT(r.seconds, 20) << name_of(b) << ": " << cmd;
    }
    fs::remove_all(suite);
  }
}

// A manifest that is a link (to a manifest elsewhere, or to /etc/passwd) is refused as well: the ground
// truth of a run is the file in it.
TEST(AdversarialCorpus, AManifestThatIsALinkIsRefused) {
  const std::string suite = fresh_suite();
  const std::string run = suite + "/a-lr-zero";
  fs::rename(run + "/manifest.json", suite + "/elsewhere.json");
  fs::create_symlink(suite + "/elsewhere.json", run + "/manifest.json");
  const Ran r = flatline_within("score " + run);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(run + "/manifest.json: the manifest: is a symbolic link"), std::string::npos) << r.out;
  fs::remove_all(suite);
}

// The re-enactment of a replayed run lives in a directory of flatline's own (mkdtemp, marked) and is
// gone after the score; a directory it did not make, where one once was, is left alone.
TEST(AdversarialCorpus, ScoringLeavesNoScratchAndDeletesOnlyItsOwn) {
  const std::string suite = fresh_suite(true);
  const auto before = snapshot(suite);
  // its own temporary directory (TMPDIR), so that no other test's score is counted
  const std::string tmp = suite + "/tmp";
  fs::create_directories(tmp);
  const Ran r = flatline_within("score " + suite + kCat, 60, "", "TMPDIR=" + tmp);
  EXPECT_NE(r.status, 2) << r.out;
  EXPECT_NE(r.status, 3) << r.out;
  std::error_code ec;
  fs::remove(suite + "/tmp", ec);  // empty, or the check below names what is left
  EXPECT_EQ(snapshot(suite), before) << "score changed the corpus it scored, or left a re-enactment directory";
  fs::remove_all(suite);
}

}  // namespace
}  // namespace flatline::attack
