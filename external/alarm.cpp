// Naming an external detector, and reading its alarm lines (external/alarm.h, docs/DETECTORS.md).
#include "external/alarm.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/printable.h"
#include "run/causes.h"

namespace flatline {
namespace {

std::string snippet(std::string_view s) {
  std::string out(s.substr(0, 80));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return s.size() > 80 ? out + "..." : out;
}

}  // namespace

ExternalDetectorSpec parse_detector_spec(const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("--detector '" + s + "': expected NAME=COMMAND");
  ExternalDetectorSpec d{s.substr(0, eq), s.substr(eq + 1)};
  if (d.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos ||
      d.name == "." || d.name == "..")
    throw std::invalid_argument("--detector '" + printable(s.substr(0, 100)) +
                                "': the name must be letters, digits, '.', '_' or '-'");
  if (d.name.size() > kMaxDetectorNameBytes)  // it names files, directories and JUnit suites
    throw std::invalid_argument(fmt::format("--detector: the name '{}...' is {} characters; at most {}",
                                            d.name.substr(0, 40), d.name.size(), kMaxDetectorNameBytes));
  if (d.command.find_first_not_of(" \t") == std::string::npos)
    throw std::invalid_argument("--detector '" + s + "': empty command");
  return d;
}

const std::vector<std::string>& alarm_causes() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> v;
    for (const auto& cause : cause_table())
      if (!is_healthy(cause.id)) v.push_back(cause.id);  // unexplained_plateau too: scored as the built-in's
    return v;
  }();
  return c;
}

std::string parse_alarm(std::string_view line, size_t line_no, int world_size, const std::set<std::string>& causes,
                        ExternalAlarm& a) {
  a = ExternalAlarm{};
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return "";
  a.line = line_no;
  using nlohmann::json;
  const std::string where = fmt::format("stdout line {}", line_no);
  json j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fmt::format("garbage on {}: not a JSON object: '{}'", where, snippet(line));
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "cause") {
      if (v.is_null()) continue;
      if (!v.is_string()) return fmt::format("garbage on {}: 'cause' must be a string", where);
      a.cause = v.get<std::string>();
      if (!causes.count(a.cause)) {
        std::string list;
        for (const auto& c : alarm_causes()) list += (list.empty() ? "" : ", ") + c;
        return fmt::format("garbage on {}: unknown cause '{}' (expected one of: {}; or none)", where,
                           snippet(a.cause), list);
      }
    } else if (k == "rank") {
      if (v.is_null()) continue;
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= world_size)
        return fmt::format("garbage on {}: 'rank' must be an integer in [0, {}), got {}", where, world_size,
                           snippet(v.dump()));
      a.rank = static_cast<int>(v.get<int64_t>());
    } else if (k == "evidence") {
      if (v.is_string()) {
        a.evidence.push_back(v.get<std::string>());
      } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
        for (const auto& e : v) a.evidence.push_back(e.get<std::string>());
      } else if (!v.is_null()) {
        return fmt::format("garbage on {}: 'evidence' must be a string or a list of strings", where);
      }
    } else if (k == "step") {
      if (!v.is_number_integer()) return fmt::format("garbage on {}: 'step' must be an integer", where);
      a.claimed_step = v.get<int64_t>();
    } else if (k == "confidence") {
      if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1))
        return fmt::format("garbage on {}: 'confidence' must be a number in [0, 1]", where);
      a.confidence = v.get<double>();
    } else {
      return fmt::format("garbage on {}: unknown key '{}' (expected cause, rank, evidence, step, confidence)", where,
                         snippet(k));
    }
  }
  return "";
}

}  // namespace flatline
