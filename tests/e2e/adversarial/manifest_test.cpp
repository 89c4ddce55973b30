// Adversarial: a run's manifest.json, the ground truth a score is computed against (docs/DESIGN.md §9
// "Untrusted input"). Every field that becomes a path, a count or text on a page is checked before it
// is used; an error names the file and the field; nothing from it reaches the terminal as an escape
// sequence; every command that reads a manifest says the same.
#include "tests/e2e/adversarial/attack.h"

namespace flatline::attack {
namespace {

struct Case {
  const char* what;
  std::string pointer;
  json value;
  std::string said;  // part of the error
};

std::vector<Case> cases() {
  return {
      {"a billion ranks", "/world_size", 1000000000, "bad manifest field 'world_size': 1000000000 (expected 1..1048576)"},
      {"a world size that wraps to 2 as an int", "/world_size", 4294967298ull,
       "bad manifest field 'world_size': 4294967298 (expected 1..1048576)"},
      {"no ranks", "/world_size", 0, "bad manifest field 'world_size': 0"},
      {"2^50 steps", "/steps", int64_t{1} << 50, "bad manifest field 'steps': 1125899906842624"},
      {"a fault on rank 7 of 2", "/faults/0/rank", 7, "bad manifest field 'faults[0].rank': 7 (world size 2)"},
      {"an expected rank of 9", "/expect/rank", 9, "bad manifest field 'expect.rank': 9 (world size 2)"},
      {"a script as the cause", "/faults/0/cause", "<script>alert(1)</script>",
       "bad manifest field 'faults[0].cause': expected an identifier"},
      {"markup as the expected cause", "/expect/cause", "lr_zero\"><img src=x onerror=alert(1)>",
       "bad manifest field 'expect.cause': expected an identifier"},
      {"an escape sequence as the mode", "/faults/0/mode", "\x1b[2J\x1b]52;c;aGk=\x07",
       "bad manifest field 'faults[0].mode': expected an identifier"},
      {"an escape sequence in the scenario", "/scenario", "run\x1b[2J", "bad manifest field 'scenario' 'run?[2J': holds a control character"},
      {"a scenario name of 300 bytes", "/scenario", std::string(300, 'a'), "is longer than 200 bytes"},
      {"the world size as text", "/world_size", "2", "bad manifest field 'world_size': got \"2\""},
  };
}

TEST(AdversarialManifest, EachBadFieldIsRefusedByEveryCommandNamingTheField) {
  const std::string suite = fresh_suite();
  const std::string run = suite + "/a-lr-zero";
  const json original = read_manifest_json(run);
  for (const Case& c : cases()) {
    write_manifest_json(run, original);
    set_manifest(run, c.pointer, c.value);
    // score and drill need the ground truth: refused (2); report shows the telemetry without it, and
    // says why (a warning)
    for (const std::string& cmd : {"score " + run, "score " + run + " --detector cat='cat >/dev/null'",
                                   "report " + run, "drill --from " + run + " --answers " + suite + "/answers.txt"}) {
      const Ran r = flatline_within(cmd, 30);
      const bool report = cmd.rfind("report", 0) == 0;
      EXPECT_EQ(r.status, report ? 0 : 2) << c.what << ": " << cmd << "\n" << r.out;
      if (report) EXPECT_NE(r.out.find("warning: " + run + "/manifest.json: "), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(run + "/manifest.json: "), std::string::npos) << c.what << ": " << cmd << "\n" << r.out;
      EXPECT_NE(r.out.find(c.said), std::string::npos) << c.what << ": " << cmd << "\n" << r.out;
      EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << c.what << ": an escape sequence reached the terminal";
      EXPECT_LT(r.seconds, 10) << c.what << ": " << cmd;  // a billion ranks: no file opened per rank
    }
  }
  fs::remove_all(suite);
}

TEST(AdversarialManifest, MoreThan1024FaultsAreRefusedBeforeTheyAreRead) {
  const std::string suite = fresh_suite();
  const std::string run = suite + "/a-lr-zero";
  json j = read_manifest_json(run);
  const json one = j["faults"][0];
  j["faults"] = json::array();
  for (int i = 0; i < 5000; ++i) j["faults"].push_back(one);
  write_manifest_json(run, j);
  const Ran r = flatline_within("score " + run);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("bad manifest field 'faults': 5000 faults (at most 1024)"), std::string::npos) << r.out;
  fs::remove_all(suite);
}

// Not JSON, too large, or not there: each said so, naming the file.
TEST(AdversarialManifest, AManifestThatIsNoManifestIsNamed) {
  const std::string suite = fresh_suite();
  const std::string run = suite + "/a-lr-zero";
  std::ofstream(run + "/manifest.json") << "[1, 2";
  Ran r = flatline_within("score " + run);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(run + "/manifest.json: not a JSON object"), std::string::npos) << r.out;
  fs::resize_file(run + "/manifest.json", 100ull << 20);  // 100 MiB of zeros, sparse
  r = flatline_within("score " + run);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(run + "/manifest.json: the manifest: is sparse"), std::string::npos) << r.out;
  {
    std::ofstream big(run + "/manifest.json");
    big << "{\"scenario\": \"" << std::string(70u << 20, 'a') << "\"}";
  }
  r = flatline_within("score " + run);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(run + "/manifest.json: the manifest: is 70.0 MiB, more than the 64.0 MiB this input may have"),
            std::string::npos) << r.out;
  fs::remove_all(suite);
}

}  // namespace
}  // namespace flatline::attack
