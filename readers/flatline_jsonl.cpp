// flatline's own telemetry (docs/DESIGN.md §3; codec in telemetry/jsonl.h): one JSON object
// per line, one file per rank (telemetry/rank-<r>.jsonl). Records are kept exactly as written
// (restarts re-emit steps, and the detectors expect every line), so a replay gives the live run's
// diagnosis. Malformed lines are warnings (file:line).
#include <filesystem>

#include "readers/registry.h"
#include "readers/text_util.h"
#include "telemetry/jsonl.h"

namespace flatline {
namespace {

class JsonlLines : public LineParser {
 public:
  JsonlLines(const std::string& name, Warnings* w) : name_(name), w_(w) {}
  void line(size_t line_no, std::string_view line, std::vector<Record>& out) override {
    try {
      out.push_back(parse_record(line, name_, line_no));
    } catch (const ParseError& e) {
      if (w_) w_->push_back(e.what());
    }
  }

 private:
  std::string name_;
  Warnings* w_;
};

std::unique_ptr<LineParser> lines(const std::string& name, Warnings* w) { return std::make_unique<JsonlLines>(name, w); }

std::vector<Record> parse(std::string_view data, const std::string& name, Warnings* w) {
  return parse_jsonl(data, name, w);
}

// A record line: an object whose first key is "kind" (how the writer orders it), or one that names a
// kind and a step further in.
Sniff sniff(std::string_view head) {
  std::string_view l = readers::trim(readers::first_line(head));
  if (l.empty() || l.front() != '{') return Sniff::no;
  if (l.substr(0, 8) == "{\"kind\":") return Sniff::sure;
  return l.find("\"kind\"") != std::string_view::npos && l.find("\"step\"") != std::string_view::npos ? Sniff::likely
                                                                                                        : Sniff::no;
}

// A run directory keeps its rank files in telemetry/; a directory of rank files is read as is.
std::vector<std::string> locate(const std::string& dir) {
  std::error_code ec;
  const std::string sub = dir + "/telemetry";
  return files_matching(std::filesystem::is_directory(sub, ec) ? sub : dir, {"*.jsonl"});
}

ReaderDef def() {
  ReaderDef d;
  d.name = "flatline";
  d.summary = "flatline telemetry: telemetry/rank-<r>.jsonl of a run directory";
  d.name_hints = {"*.jsonl"};
  d.sniff = sniff;
  d.parse = parse;
  d.locate = locate;
  d.lines = lines;
  d.records_name_rank = true;
  d.priority = 10;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
