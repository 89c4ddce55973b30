// Logs written by the real libraries (tests/data/logs/real/, generate.py: transformers Trainer,
// Lightning's CSVLogger and TensorBoardLogger, torch.utils.tensorboard, wandb offline, torchrun):
// every output of every case is read and diagnosed as its label says, by the reader its format
// calls for. The labels are the generator's: what each run was made to reproduce.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "run/causes.h"
#include "tests/readers/helpers.h"

namespace flatline::testing {
namespace {
namespace fs = std::filesystem;

struct Output {
  std::string case_name, path, format, cause;
  int rank = -1;
};
void PrintTo(const Output& o, std::ostream* os) { *os << o.case_name << ": " << o.path; }

// One entry per output of a case: the case's files grouped by their first path component
// (trainer_state.json, tb/, lightning_logs/, wandb/, console.log), each read as a whole.
std::vector<Output> outputs() {
  std::ifstream in(logs("real/labels.json"));
  const auto labels = nlohmann::json::parse(in);
  std::vector<Output> out;
  static const std::map<std::string, std::string> kFormat = {{"trainer_state.json", "hf"},
                                                             {"tb", "tensorboard"},
                                                             {"lightning_logs", "lightning"},
                                                             {"wandb", "wandb-run"},
                                                             {"console.log", "console"}};
  for (const auto& [name, c] : labels["cases"].items()) {
    std::set<std::string> groups;
    for (const auto& f : c["files"]) groups.insert(fs::path(f.get<std::string>()).begin()->string());
    for (const auto& g : groups) {
      Output o;
      o.case_name = name;
      o.path = logs("real/" + name + "/" + g);
      o.format = kFormat.at(g);
      o.cause = c["cause"];
      o.rank = c["rank"].is_null() ? -1 : c["rank"].get<int>();
      out.push_back(o);
    }
  }
  return out;
}

class RealLog : public ::testing::TestWithParam<Output> {};

TEST_P(RealLog, ReadByItsReaderAndDiagnosedAsLabelled) {
  const Output& o = GetParam();
  LogData log = read_log(o.path);
  EXPECT_EQ(log.format, o.format);
  EXPECT_GE(log.records.size(), 10u);
  Diagnosis d = replay(log);
  EXPECT_EQ(d.cause, o.cause) << to_text(d);
  if (o.rank >= 0) EXPECT_EQ(d.rank, o.rank);
}

INSTANTIATE_TEST_SUITE_P(Libraries, RealLog, ::testing::ValuesIn(outputs()),
                         [](const ::testing::TestParamInfo<Output>& i) {
                           std::string n = i.param.case_name + "_" + i.param.format;
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(RealLogs, EveryLabelledCauseAndHealthyTwinIsThere) {
  std::set<std::string> causes;
  for (const auto& o : outputs()) causes.insert(o.cause);
  for (const Cause& c : cause_table())  // every cause a single log shows: all but the fleet's
    if (c.kind != CauseKind::fleet) EXPECT_TRUE(causes.count(c.id)) << c.id;
}

}  // namespace
}  // namespace flatline::testing
