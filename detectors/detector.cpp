// CheckState names and the detector registry (registry.h). Each cause's detector lives
// in its own file and registers itself; make_detector() looks it up by cause id.
#include "detectors/detector.h"

#include <stdexcept>

#include "core/registry.h"
#include "detectors/registry.h"

namespace flatline {
namespace {

Registry<DetectorFactory>& registry() {
  static Registry<DetectorFactory> r("detector");
  return r;
}

}  // namespace

void Detector::observe_block(const Record* records, size_t n) {
  StepBlock b;
  in_blocks(records, n, b, [this](const StepBlock& x) { observe_block(x); }, [this](const Record& r) { observe(r); });
}

void BlockDetector::observe(const Record& r) {
  if (r.kind != RecordKind::step && r.kind != RecordKind::heartbeat) return observe_event(r);
  thread_local StepBlock one;
  one.clear();
  one.append(r);
  one.seal();
  observe_block(one);
}

const char* to_string(CheckState s) {
  switch (s) {
    case CheckState::pending: return "pending";
    case CheckState::pass: return "pass";
    case CheckState::fail: return "fail";
    case CheckState::cannot_run: return "cannot run";
  }
  return "?";
}

void register_detector(const std::string& cause, DetectorFactory f) { registry().add(cause, std::move(f)); }

std::vector<std::string> registered_detectors() { return registry().names(); }

// An unknown cause is a programming error (the checklist is fixed), not odd data: fail fast.
std::unique_ptr<Detector> make_detector(const std::string& cause, const DetectorConfig& cfg) {
  const DetectorFactory* make = registry().find(cause);
  if (!make) throw std::invalid_argument("no detector for cause '" + cause + "' (registered: " +
                                         join_ids(registry().names(), ", ") + ")");
  return (*make)(cfg);
}

}  // namespace flatline
