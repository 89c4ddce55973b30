// flatline's own telemetry (docs/DESIGN.md §3; codec in telemetry/jsonl.h): one JSON object
// per line. Records are kept exactly as written (restarts re-emit steps, and the detectors expect
// every line), so a replay gives the live run's diagnosis. Malformed lines are warnings (file:line).
#include <fmt/format.h>

#include "readers/reader.h"
#include "readers/text_util.h"
#include "telemetry/jsonl.h"

namespace flatline {

std::vector<Record> parse_flatline_jsonl(std::string_view data, const std::string& name, Warnings* w) {
  std::vector<Record> out;
  readers::for_each_line(data, name, w, [&](size_t line_no, std::string_view line) {
    try {
      out.push_back(parse_record(line, name, line_no));
    } catch (const ParseError& e) {
      if (w) w->push_back(e.what());
    }
  });
  return out;
}

}  // namespace flatline
