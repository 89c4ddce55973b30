// libFuzzer targets for the files a recorded run is trusted least with (docs/DESIGN.md §9 "Untrusted
// input"): FUZZ_FILE "manifest" (telemetry/manifest.h: read_manifest) and "corpus"
// (telemetry/corpus.h: read_corpus, over a one-run corpus). The input becomes the file's bytes, written
// to a directory of the target's own; the contract: the reader returns, or throws its own error
// (ManifestError and InputError; CorpusError), nothing else, with ASan/UBSan quiet. Seeds:
// tests/data/fuzz-files/<FUZZ_FILE>/ (tests/telemetry/fuzz_files_test.cpp replays them in every ctest).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/input_file.h"
#include "telemetry/corpus.h"
#include "telemetry/manifest.h"

namespace {
namespace fs = std::filesystem;

// A corpus with one run ("r": a manifest and one telemetry file) for corpus.json to name.
const std::string& scratch() {
  static const std::string dir = [] {
    std::string t = (fs::temp_directory_path() / "flatline-fuzz-XXXXXX").string();
    if (!mkdtemp(t.data())) std::abort();
    fs::create_directories(t + "/r/telemetry");
    std::ofstream(t + "/r/manifest.json") << R"({"scenario": "r", "world_size": 1, "steps": 1})";
    std::ofstream(t + "/r/telemetry/rank-0.jsonl") << R"({"kind":"step","rank":0,"step":1,"loss":1})" << "\n";
    return t;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = scratch();
  const std::string file = dir + (std::string(FUZZ_FILE) == "manifest" ? "/m.json" : "/corpus.json");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    if (std::string(FUZZ_FILE) == "manifest") {
      (void)flatline::read_manifest(file);
    } else {
      (void)flatline::read_corpus(dir);
    }
  } catch (const flatline::InputError&) {  // ManifestError is one
  } catch (const flatline::CorpusError&) {
  }
  return 0;
}
