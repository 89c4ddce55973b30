// A recorded corpus: the run directories one `flatline score --out DIR` wrote, with DIR/corpus.json
// listing each run and a content hash (XXH3-128, hex) of every file a score depends on: scenario.yaml,
// manifest.json (the ground truth), telemetry/*.jsonl and formats/** (foreign-format logs). A run's
// hash covers its files (sorted path + hash); the corpus id covers the runs (sorted name + hash), so
// a scoreboard names exactly the data it was computed on, and a changed byte anywhere is caught
// before scoring (CorpusError names the run and the file).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace flatline {

class CorpusError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr int kCorpusVersion = 1;  // corpus.json's format; bumped when a field changes meaning
constexpr size_t kMaxCorpusRuns = 100000;

// The corpus id is an integrity check, not a signature: it catches a changed byte, never a deliberate
// change, since anyone can re-hash a tampered corpus. A corpus is untrusted input, read as such
// (docs/DESIGN.md §9): run names are single path components, files regular files inside the run.

struct CorpusRun {
  std::string name;                                        // run directory name (= scenario name)
  std::vector<std::pair<std::string, std::string>> files;  // path relative to the run dir -> hash
  std::string hash;
};

struct Corpus {
  int version = kCorpusVersion;
  std::string id;        // XXH3-128 of the runs
  std::string created;   // UTC, ISO 8601
  std::string flatline;  // version that recorded it
  std::vector<CorpusRun> runs;
};

std::string hash_file(const std::string& path);  // XXH3-128 hex; throws CorpusError if unreadable

// The hash of one run directory's scored files, and the id of a set of runs (the corpus id when the
// set is a whole corpus).
CorpusRun hash_run(const std::string& dir, const std::string& name);
std::string corpus_id(const std::vector<CorpusRun>& runs);

// Hashes the named run directories under `dir`. Throws CorpusError for a missing run or file.
Corpus make_corpus(const std::string& dir, const std::vector<std::string>& run_names);
void write_corpus(const Corpus& c, const std::string& dir);  // dir/corpus.json, atomically
bool is_corpus(const std::string& dir);
// Reads dir/corpus.json and re-hashes every file: a difference (or a file added to a run's hashed
// set, or one missing) throws CorpusError naming the run and the file.
Corpus read_corpus(const std::string& dir);

}  // namespace flatline
