// docs/DESIGN.md is the design of record, and its tables say what the code does: this test holds them
// to the code, so that a change to one without the other fails here. The cause table (§2) against
// run/causes.h, the scenario keys and their defaults (§4) against the loader (faults/scenario_file.h),
// the fault kinds, modes and parameters (§5) against the fault registry (faults/fault.h), and the rank's
// exit statuses (§8) against core/protocol.h.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/protocol.h"
#include "faults/fault.h"
#include "faults/scenario_file.h"
#include "run/causes.h"

namespace flatline {
namespace {

std::string design() {
  std::ifstream in(std::string(FLATLINE_SOURCE_DIR) + "/docs/DESIGN.md");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text of section "## N. ..." up to the next "## ".
std::string section(int n) {
  const std::string d = design();
  const std::string head = "\n## " + std::to_string(n) + ". ";
  const size_t a = d.find(head);
  if (a == std::string::npos) return "";
  const size_t b = d.find("\n## ", a + head.size());
  return d.substr(a, b == std::string::npos ? std::string::npos : b - a);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// "`x`" -> "x"; anything else as it is.
std::string unquote(const std::string& s) {
  return s.size() >= 2 && s.front() == '`' && s.back() == '`' ? s.substr(1, s.size() - 2) : s;
}

// The rows of the first table in `text` whose header row starts with `first_column`, cells trimmed.
std::vector<std::vector<std::string>> table(const std::string& text, const std::string& first_column) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("|", 0) != 0) {
      if (inside) break;
      continue;
    }
    std::vector<std::string> cells;
    // cells split on '|' outside backticks (a default like `[0.9, 0.95]` holds none, but a help may)
    std::string cell;
    bool code = false;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '`') code = !code;
      if (line[i] == '|' && !code) {
        cells.push_back(trim(cell));
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    if (!inside) {
      inside = !cells.empty() && cells[0] == first_column;
      continue;
    }
    if (!cells.empty() && cells[0].rfind("---", 0) == 0) continue;  // the separator row
    rows.push_back(cells);
  }
  return rows;
}

// The backticked words of a cell, in order.
std::vector<std::string> quoted(const std::string& cell) {
  std::vector<std::string> out;
  for (size_t a = cell.find('`'); a != std::string::npos; a = cell.find('`', a)) {
    const size_t b = cell.find('`', a + 1);
    if (b == std::string::npos) break;
    out.push_back(cell.substr(a + 1, b - a - 1));
    a = b + 1;
  }
  return out;
}

const char* kind_name(CauseKind k) {
  switch (k) {
    case CauseKind::checklist: return "checklist";
    case CauseKind::fleet: return "fleet";
    case CauseKind::verdict: return "verdict";
  }
  return "?";
}

TEST(Design, Section2CauseTableIsTheCodesTableRowForRow) {
  const auto rows = table(section(2), "#");
  ASSERT_EQ(rows.size(), cause_table().size()) << "§2's cause table and run/causes.cpp differ in rows";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Cause& c = cause_table()[i];
    ASSERT_GE(rows[i].size(), 5u);
    EXPECT_EQ(unquote(rows[i][1]), c.id) << "row " << i + 1;
    EXPECT_EQ(rows[i][2], kind_name(c.kind)) << c.id;
    if (c.kind != CauseKind::verdict) EXPECT_EQ(rows[i][3], c.names_rank ? "yes" : "no") << c.id;
    EXPECT_EQ(unquote(rows[i][4]), *c.drill_signal ? c.drill_signal : "–") << c.id;
    // the checklist rows are numbered in checklist order; the others are not
    if (c.kind == CauseKind::checklist) EXPECT_EQ(rows[i][0], std::to_string(i + 1)) << c.id;
    else EXPECT_EQ(rows[i][0], "–") << c.id;
  }
}

// §4's table: every key the loader reads, once, in one row each (a row may name several keys).
std::vector<std::pair<std::string, std::string>> scenario_rows() {
  std::vector<std::pair<std::string, std::string>> out;  // key -> its default cell (split for a row of several)
  for (const auto& row : table(section(4), "key")) {
    const std::vector<std::string> keys = quoted(row.at(0));
    if (keys.size() == 1) {
      out.emplace_back(keys[0], row.at(1));
      continue;
    }
    std::vector<std::string> defaults;  // "16, 1": one default per key
    std::stringstream in(row.at(1));
    for (std::string d; std::getline(in, d, ',');) defaults.push_back(trim(d));
    EXPECT_EQ(defaults.size(), keys.size()) << row.at(0);
    for (size_t i = 0; i < keys.size() && i < defaults.size(); ++i) out.emplace_back(keys[i], defaults[i]);
  }
  return out;
}

TEST(Design, Section4ListsEveryScenarioKeyOnceInTheLoadersOrder) {
  std::vector<std::string> documented;
  for (const auto& [key, _] : scenario_rows()) documented.push_back(key);
  EXPECT_EQ(documented, scenario_keys());
  std::set<std::string> once(documented.begin(), documented.end());
  EXPECT_EQ(once.size(), documented.size()) << "a key is listed twice";
}

// Whether the resolved value `got` (a YAML node of the loaded minimal scenario) is what the documented
// default `doc` (a YAML text) says: maps key by key (the documented keys only), lists and scalars as
// numbers where both are numbers, else as text. `steps` stands for the scenario's steps.
void expect_same(const YAML::Node& doc, const YAML::Node& got, const std::string& where, int64_t steps) {
  if (doc.IsMap()) {
    ASSERT_TRUE(got.IsMap()) << where;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      ASSERT_TRUE(got[k]) << where << "." << k << ": the loader resolves no such key";
      expect_same(it->second, got[k], where + "." + k, steps);
    }
    return;
  }
  if (doc.IsSequence()) {
    ASSERT_TRUE(got.IsSequence()) << where;
    ASSERT_EQ(doc.size(), got.size()) << where;
    for (size_t i = 0; i < doc.size(); ++i) expect_same(doc[i], got[i], where + "[" + std::to_string(i) + "]", steps);
    return;
  }
  std::string d = doc.as<std::string>(), g = got.as<std::string>();
  if (d == "steps") d = std::to_string(steps);
  double dv = 0, gv = 0;
  if (YAML::convert<double>::decode(doc, dv) && YAML::convert<double>::decode(got, gv) && d != "steps")
    EXPECT_EQ(dv, gv) << where << ": documented " << d << ", the loader gives " << g;
  else
    EXPECT_EQ(d, g) << where;
}

TEST(Design, Section4DefaultsAreTheLoaders) {
  const char* minimal = "name: x\nexpect: {cause: healthy}\n";
  const Scenario s = load_scenario_text(minimal, "minimal");
  const YAML::Node resolved = YAML::Load(to_yaml(s));
  // the loss scaler is resolved (and written) only with fp16
  const YAML::Node fp16 = YAML::Load(to_yaml(load_scenario_text(std::string(minimal) + "precision: fp16\n", "fp16")));
  const Scenario defaults;
  int checked = 0;
  for (const auto& [key, cell] : scenario_rows()) {
    const std::string text = unquote(cell);
    if (text == "required") continue;  // name, expect: no default to hold
    if (key == "restart" || key == "trainer") {  // none: absent until a scenario says
      EXPECT_EQ(text, "none") << key;
      EXPECT_FALSE(resolved[key]) << key;
      continue;
    }
    if (key == "fleet_only") {  // written only when set
      EXPECT_EQ(text, defaults.fleet_only ? "true" : "false");
      continue;
    }
    if (key == "formats") {  // written only when there are some
      EXPECT_EQ(YAML::Load(text)["write"].size(), defaults.formats.size());
      EXPECT_EQ(YAML::Load(text)["every"].as<int>(), defaults.formats_every);
      continue;
    }
    const YAML::Node& from = key == "loss_scaler" ? fp16 : resolved;
    ASSERT_TRUE(from[key]) << key << ": the loader resolves no such key";
    expect_same(YAML::Load(text), from[key], key, s.steps);
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(Design, Section4NamesTheKeysAnExternalTrainerMayNotSet) {
  for (const auto& row : table(section(4), "key"))
    if (row.at(0) == "`trainer`") {
      const std::string cell = row.at(2);
      const std::vector<std::string> words = quoted(cell.substr(cell.find("then")));
      EXPECT_EQ(std::vector<std::string>(words.begin(), words.end()), keys_of_own_trainer());
      return;
    }
  FAIL() << "§4 has no row for `trainer`";
}

// §5's table: kind, mode, params (a row without a kind continues the one above).
TEST(Design, Section5FaultTableIsTheRegistry) {
  std::map<std::string, std::map<std::string, std::string>> documented;  // kind -> mode -> params cell
  std::string kind;
  for (const auto& row : table(section(5), "kind")) {
    ASSERT_GE(row.size(), 4u);
    if (!row[0].empty()) kind = unquote(row[0]);
    EXPECT_TRUE(documented[kind].emplace(unquote(row[1]), row[3]).second) << kind << "/" << row[1] << " twice";
  }
  std::vector<std::string> kinds;
  for (const auto& [k, _] : documented) kinds.push_back(k);
  EXPECT_EQ(kinds, fault_kind_names());
  for (const auto& [k, modes] : documented) {
    const FaultKindDef* def = find_fault_kind(k);
    if (!def) continue;
    std::set<std::string> registered;
    for (const ModeDef& m : def->modes) registered.insert(m.name);
    std::set<std::string> listed;
    for (const auto& [m, _] : modes) listed.insert(m);
    EXPECT_EQ(listed, registered) << k;
    for (const auto& [m, cell] : modes) {
      const ModeDef* mode = def->mode(m);
      if (!mode) continue;
      // each parameter: `name` (integer >= 1 ...) or `name` (> 0 ...): its name, type and bound
      const std::regex param("`([a-z_]+)` \\((integer )?(>=|>) ([0-9.]+)");
      std::set<std::string> names;
      for (std::sregex_iterator it(cell.begin(), cell.end(), param), end; it != end; ++it) {
        const std::string name = (*it)[1];
        names.insert(name);
        const ParamDef* p = mode->param(name);
        ASSERT_NE(p, nullptr) << k << "/" << m << ": `" << name << "` is no parameter of the mode";
        EXPECT_EQ(p->type == ParamType::integer, (*it)[2].matched) << k << "/" << m << " " << name;
        EXPECT_EQ(p->above_min, (*it)[3] == ">") << k << "/" << m << " " << name;
        EXPECT_EQ(p->min, std::stod((*it)[4])) << k << "/" << m << " " << name;
      }
      std::set<std::string> declared;
      for (const ParamDef& p : mode->params) declared.insert(p.name);
      EXPECT_EQ(names, declared) << k << "/" << m;
    }
  }
}

// §8's "exit status:" entry: each status the rank protocol names (core/protocol.h), with its meaning.
TEST(Design, Section8ExitStatusesAreTheProtocols) {
  const std::string s8 = section(8);
  const size_t a = s8.find("- exit status: ");
  ASSERT_NE(a, std::string::npos);
  const std::string entry = std::regex_replace(s8.substr(a, s8.find("\n- ", a + 1) - a), std::regex("\n +"), " ");
  std::map<int, std::string> documented;  // status -> its words
  const std::regex item("(?:: |; )([0-9]+)(?: \\+ N)? ([^;]+)");
  for (std::sregex_iterator it(entry.begin(), entry.end(), item), end; it != end; ++it)
    documented[std::stoi((*it)[1])] = (*it)[2];
  const std::vector<std::pair<int, const char*>> protocol = {
      {kExitOk, "done"},
      {kExitRankError, "RankError"},
      {kExitRestart, "restart"},
      {kExitParamMismatch, "parameters differed"},
      {kExitInvariant, "broken invariant"},
      {kExitInternal, "internal error"},
      {kExitExecFailed, "could not be executed"},
      {kExitSignalBase, "signal"},
  };
  EXPECT_EQ(documented.size(), protocol.size()) << entry;
  for (const auto& [code, words] : protocol) {
    ASSERT_TRUE(documented.count(code)) << "§8 names no exit status " << code << " (" << words << ")";
    EXPECT_NE(documented[code].find(words), std::string::npos) << code << ": " << documented[code];
  }
  EXPECT_EQ(kExitUsage, kExitRankError);  // bad input exits 2 too, the same entry
}

}  // namespace
}  // namespace flatline
