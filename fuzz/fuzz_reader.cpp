// One libFuzzer target per reader (FUZZ_FORMAT names it: fuzz/CMakeLists.txt). The contract under test
// (readers/reader.h): on any bytes, a reader returns records and warnings or throws ReadError; nothing
// else escapes, nothing crashes, and ASan/UBSan stay quiet. The records are then fed to the whole
// Triage, since detectors must not throw on odd data either (detectors/detector.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "detectors/triage.h"
#include "readers/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Looked up on first use: the readers register themselves from static initialisers.
  static const flatline::ParseFn parse = flatline::parser_for(FUZZ_FORMAT);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  flatline::Warnings w;
  try {
    auto recs = parse(in, "fuzz-input", &w);
    flatline::Triage tri;
    for (const auto& r : recs) tri.observe(r);
    tri.finish(1e9);
    (void)tri.diagnosis();
  } catch (const flatline::ReadError&) {
  }
  return 0;
}
