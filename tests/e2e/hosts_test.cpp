// Ranks on separate hosts: two network namespaces joined by a veth pair stand for two hosts, rank r
// runs in host r (`flatline run --rank-wrapper "ip netns exec <host>{rank}"`) and MASTER_ADDR is host
// 0's address, so the store, the join and every all-reduce cross the link. (a) a healthy 2-host run
// writes the telemetry of a 1-host run; (b) cutting the link mid-run ends every rank with its own
// clear error within the collective timeout, every completed step on disk, diagnosed run_not_alive
// from the telemetry; (c) a stopped host (SIGSTOP of its rank) is detected live and named. Needs root
// and iproute2 (CI runs as root); skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "telemetry/manifest.h"
#include "tests/e2e/helpers.h"

namespace {
using namespace flatline::e2e;
using flatline::Record;
using flatline::RecordKind;

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// `ip -n NS ...` makes / a slave mount first, which fails where / is not a mount point (a chroot into a
// plain directory): /proc/self/mountinfo lists "/" as a mount point (its fifth field) only where it is.
bool root_is_a_mount_point() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, mount_point;
    if (f >> id >> parent >> dev >> root >> mount_point && mount_point == "/") return true;
  }
  return false;
}

class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(getpid() % 100000);
    prefix_ = "fl" + id + "h";
    subnet_ = "10.213." + std::to_string(getpid() % 250) + ".";
    if (geteuid() != 0) {
      why_not_ = "needs root for network namespaces (ip netns); CI runs as root";
      return;
    }
    if (sh("ip -V") != 0) {
      why_not_ = "iproute2 (ip) is not installed";
      return;
    }
    if (!root_is_a_mount_point()) {  // before `ip netns add`, which would leave /run/netns mounted
      why_not_ = "/ is not a mount point here (a chroot?): `ip -n` cannot make / a slave mount";
      return;
    }
    const std::string a = "fl" + id + "a", b = "fl" + id + "b";
    dev_[0] = a;
    dev_[1] = b;
    const std::string cmds[] = {
        "ip netns add " + ns(0), "ip netns add " + ns(1),
        "ip link add " + a + " type veth peer name " + b,
        "ip link set " + a + " netns " + ns(0), "ip link set " + b + " netns " + ns(1),
        "ip -n " + ns(0) + " addr add " + addr(0) + "/24 dev " + a,
        "ip -n " + ns(1) + " addr add " + addr(1) + "/24 dev " + b,
        "ip -n " + ns(0) + " link set " + a + " up", "ip -n " + ns(1) + " link set " + b + " up",
        // a rank reaches its own address through loopback
        "ip -n " + ns(0) + " link set lo up", "ip -n " + ns(1) + " link set lo up"};
    for (const auto& c : cmds) {
      if (sh(c) != 0) {
        why_not_ = "network namespaces are not permitted here ('" + c + "' failed)";
        return;
      }
    }
  }
  ~TwoHosts() {
    sh("ip netns del " + ns(0));  // its end of the veth pair goes with it, and so does the other
    sh("ip netns del " + ns(1));
  }
  const std::string& why_not() const { return why_not_; }
  std::string ns(int i) const { return prefix_ + std::to_string(i); }
  std::string addr(int i) const { return subnet_ + std::to_string(i + 1); }
  std::vector<std::string> run_args() const {
    return {"--rank-wrapper", "ip netns exec " + prefix_ + "{rank}", "--master-addr", addr(0)};
  }
  void cut_link() const { ASSERT_EQ(sh("ip -n " + ns(0) + " link set " + dev_[0] + " down"), 0); }

 private:
  std::string prefix_, subnet_, why_not_, dev_[2];
};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every record but heartbeats (their number follows the wall clock), without the wall-clock fields,
// with the run directory taken out of event details (checkpoint paths).
std::vector<nlohmann::json> comparable(const std::string& run_dir, int rank) {
  std::vector<nlohmann::json> out;
  for (const Record& r : flatline::read_jsonl(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl", nullptr)) {
    if (r.kind == RecordKind::heartbeat) continue;
    nlohmann::json j = nlohmann::json::parse(flatline::to_json(r));
    for (const char* k : {"t", "step_ms", "comm_ms"}) j.erase(k);
    if (j.contains("detail")) {
      std::string d = j["detail"];
      if (auto at = d.find(run_dir); at != std::string::npos) d.erase(at, run_dir.size());
      j["detail"] = d;
    }
    out.push_back(j);
  }
  return out;
}

const std::string kLong = std::string(kTinyBase) + R"(steps: 100000
schedule: {kind: constant}
collective_timeout_s: 5
expect: {cause: healthy}
)";

TEST(Hosts, AHealthyTwoHostRunWritesTheTelemetryOfAOneHostRun) {
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string d = scratch();
  write(d, "s.yaml", "name: e2e-hosts\n" + std::string(kTinyBase) + R"(steps: 40
schedule: {kind: cosine, warmup: 5}
checkpoint: {every: 20}
eval: {every: 20, batches: 2}
expect: {cause: healthy}
)");
  Ran one = flatline::e2e::run("run " + d + "/s.yaml --out " + d + "/one");
  ASSERT_EQ(one.status, 0) << one.out;
  Background two(concat({"run", d + "/s.yaml", "--out", d + "/two"}, hosts.run_args()), d + "/two.txt");
  ASSERT_EQ(two.wait(120), 0) << two.output();
  for (int rank = 0; rank < 2; ++rank) {
    const auto a = comparable(d + "/one/e2e-hosts", rank), b = comparable(d + "/two/e2e-hosts", rank);
    ASSERT_GT(a.size(), 40u);
    ASSERT_EQ(a.size(), b.size()) << "rank " << rank;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "rank " << rank << ", record " << i;
  }
  expect_no_process_left(d);
}

TEST(Hosts, CuttingTheLinkEndsEveryRankWithItsOwnErrorWithinTheCollectiveTimeout) {
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string d = scratch();
  write(d, "s.yaml", "name: e2e-cut\n" + kLong);
  const std::string run_dir = d + "/runs/e2e-cut";
  Background run(concat({"run", d + "/s.yaml", "--out", d + "/runs"}, hosts.run_args()), d + "/out.txt");
  ASSERT_TRUE(wait_for_steps(run_dir, 1, 30, 90)) << run.output();
  const int64_t before = std::min(steps_on_disk(run_dir + "/telemetry/rank-0.jsonl"),
                                  steps_on_disk(run_dir + "/telemetry/rank-1.jsonl"));
  const auto cut = std::chrono::steady_clock::now();
  hosts.cut_link();
  const int status = run.wait(60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  EXPECT_EQ(status, 1) << run.output();
  EXPECT_LT(took, 5 + 5) << run.output();  // each rank's own collective timeout (5 s), not the launcher's kill
  for (int rank = 0; rank < 2; ++rank) {
    const Record last = last_record(run_dir, rank);
    EXPECT_EQ(last.name, "error") << "rank " << rank << " did not end with its own error: " << last.detail;
    EXPECT_NE(last.detail.find("all-reduce"), std::string::npos) << last.detail;
    EXPECT_GE(steps_on_disk(run_dir + "/telemetry/rank-" + std::to_string(rank) + ".jsonl"), before);
  }
  EXPECT_EQ(flatline::read_manifest(run_dir + "/manifest.json").status, "failed");
  Ran diag = flatline::e2e::run("diagnose " + run_dir);
  EXPECT_NE(diag.out.find("diagnosis: run_not_alive"), std::string::npos) << diag.out;
  expect_no_process_left(d);
}

TEST(Hosts, AStoppedHostIsDetectedLiveAndNamed) {
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string d = scratch();
  write(d, "s.yaml", "name: e2e-stopped-host\n" + kLong);
  const std::string run_dir = d + "/runs/e2e-stopped-host";
  Background run(concat({"run", d + "/s.yaml", "--out", d + "/runs"}, hosts.run_args()), d + "/out.txt");
  // heartbeats enough that their interval is known (0.2 s here)
  ASSERT_TRUE(wait_for_records(run_dir, 1, RecordKind::heartbeat, 8, 90)) << run.output();
  const int host1 = find_worker(run_dir, 1);
  ASSERT_GT(host1, 0);
  kill(host1, SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  std::string out;
  while (std::chrono::steady_clock::now() - stopped < std::chrono::seconds(8)) {
    out = run.output();
    if (out.find("[live]") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const size_t live = out.find("[live]");
  ASSERT_NE(live, std::string::npos) << out;
  EXPECT_LT(took, 5.0) << "before the collective timeout (5 s) ends the run: " << out;
  const std::string line = out.substr(live, out.find('\n', live) - live);
  EXPECT_NE(line.find("run_not_alive"), std::string::npos) << line;
  EXPECT_NE(line.find("rank 1 silent since"), std::string::npos) << line;
  run.signal(SIGTERM);  // forwarded with SIGCONT: the stopped rank leaves too
  EXPECT_EQ(run.wait(30), 143) << run.output();
  expect_no_process_left(d);
}

}  // namespace
