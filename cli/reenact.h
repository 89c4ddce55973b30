// Replays: the run directory an external detector sees, re-enacted at the pace it reads. Each detector
// gets its own <scratch>/<detector>/<run>/ holding only what a live run's detector could read by then:
// telemetry/rank-<r>.jsonl and the foreign-format logs (formats/, telemetry/writers/writer.h), each
// record written just before the detector's stdin gets it. No scenario.yaml, manifest.json or
// diagnosis.json: the ground truth and the built-in answer are not there to be read.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "external/feed.h"
#include "run/scenario.h"
#include "telemetry/jsonl.h"
#include "telemetry/manifest.h"
#include "telemetry/writers/writer.h"

namespace flatline::cli {

// The formats of a run of `s`, with `extra` (--formats) added.
std::vector<std::string> merged_formats(const Scenario& s, const std::vector<std::string>& extra);
// The formats a recorded run wrote (its formats/ directories, its scenario's), with `extra` added.
std::vector<std::string> formats_of(const std::string& recorded_run, const std::vector<std::string>& extra);

class Reenactment {
 public:
  Reenactment(const std::string& scratch, const Manifest& m, const std::vector<ExternalDetectorSpec>& detectors,
              const std::vector<std::string>& formats, const std::string& recorded_run);
  ~Reenactment();  // removes the directories
  std::vector<std::string> run_dirs() const;
  // Per detector: FLATLINE_FORMATS and FLATLINE_LOG_<FORMAT> of its directory.
  std::vector<std::vector<std::pair<std::string, std::string>>> envs() const;
  void write(size_t detector, const Record& r);

 private:
  struct Dir {
    std::string path;
    std::vector<std::unique_ptr<JsonlWriter>> ranks;
    std::unique_ptr<FormatSink> formats;
  };
  std::vector<Dir> dirs_;
  std::vector<std::string> formats_;
};

}  // namespace flatline::cli
