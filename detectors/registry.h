// Detector registry: each detector file registers a factory under its cause id with
// FLATLINE_REGISTER_DETECTOR, so make_detector(cause, cfg) (detector.h) finds it by name; a cause
// registered twice is a broken invariant (core/registry.h). flatline_core is a shared library, so the
// static registrars in each detector file are always kept.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "detectors/detector.h"

namespace flatline {

using DetectorFactory = std::function<std::unique_ptr<Detector>(const DetectorConfig&)>;
void register_detector(const std::string& cause, DetectorFactory f);
// Every registered cause id, sorted (the checklist's five and any extra finding, e.g. straggler).
std::vector<std::string> registered_detectors();

}  // namespace flatline

#define FLATLINE_REGISTER_DETECTOR(cause, Type)                                                 \
  static const bool flatline_detector_registered_##Type = [] {                                  \
    ::flatline::register_detector(cause, [](const ::flatline::DetectorConfig& c) {              \
      return std::unique_ptr<::flatline::Detector>(new Type(c));                                \
    });                                                                                         \
    return true;                                                                                \
  }()
