// Corpus manifest and content hashes (telemetry/corpus.h).
#include "telemetry/corpus.h"

#include "core/input_file.h"
#include "core/safe_path.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace flatline {
namespace fs = std::filesystem;
namespace {

std::string hex(const XXH128_hash_t& h) { return fmt::format("{:016x}{:016x}", h.high64, h.low64); }

std::string hash_text(const std::string& s) { return hex(XXH3_128bits(s.data(), s.size())); }

// The files of a run that a score depends on, relative to the run directory, sorted.
std::vector<std::string> scored_files(const fs::path& run) {
  std::vector<std::string> out;
  for (const char* f : {"scenario.yaml", "manifest.json"})
    if (fs::is_regular_file(run / f)) out.push_back(f);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run / "telemetry", ec))
    if (e.path().extension() == ".jsonl") out.push_back("telemetry/" + e.path().filename().string());
  if (fs::is_directory(run / "formats"))
    for (const auto& e : fs::recursive_directory_iterator(run / "formats", ec))
      if (e.is_regular_file()) out.push_back(fs::relative(e.path(), run).string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string run_hash(const CorpusRun& r) {
  std::string all;
  for (const auto& [path, h] : r.files) all += path + '\0' + h + '\n';
  return hash_text(all);
}

}  // namespace

std::string corpus_id(const std::vector<CorpusRun>& runs) {
  std::vector<std::string> lines;
  for (const auto& r : runs) lines.push_back(r.name + '\0' + r.hash + '\n');
  std::sort(lines.begin(), lines.end());
  std::string all;
  for (const auto& l : lines) all += l;
  return hash_text(all);
}

CorpusRun hash_run(const std::string& dir_s, const std::string& name) {
  const fs::path dir(dir_s);
  const fs::path run = dir / name;
  if (!fs::is_directory(run)) throw CorpusError(run.string() + ": no such run directory");
  CorpusRun r;
  r.name = name;
  for (const auto& f : scored_files(run)) r.files.emplace_back(f, hash_file((run / f).string()));
  r.hash = run_hash(r);
  return r;
}

std::string hash_file(const std::string& path) {
  std::FILE* f = nullptr;
  try {
    f = fopen_input(path, kMaxLogFileBytes, "a file of the run");  // a FIFO, a link: refused, never read
  } catch (const InputError& e) {
    throw CorpusError(e.what());
  }
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) XXH3_128bits_update(st, buf, n);
  const bool bad = std::ferror(f);
  std::fclose(f);
  const std::string h = hex(XXH3_128bits_digest(st));
  XXH3_freeState(st);
  if (bad) throw CorpusError(path + ": read error while hashing");
  return h;
}

Corpus make_corpus(const std::string& dir, const std::vector<std::string>& run_names) {
  Corpus c;
  for (const auto& n : run_names) c.runs.push_back(hash_run(dir, n));
  c.id = corpus_id(c.runs);
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  c.created = buf;
  c.flatline = FLATLINE_VERSION;
  return c;
}

void write_corpus(const Corpus& c, const std::string& dir) {
  nlohmann::json j;
  j["corpus_version"] = c.version;
  j["id"] = c.id;
  j["created"] = c.created;
  j["flatline"] = c.flatline;
  j["hash"] = "xxh3-128";
  j["runs"] = nlohmann::json::array();
  for (const auto& r : c.runs) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [p, h] : r.files) files[p] = h;
    j["runs"].push_back({{"name", r.name}, {"hash", r.hash}, {"files", files}});
  }
  const std::string path = dir + "/corpus.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw CorpusError(path + ": cannot write");
    out << j.dump(2) << "\n";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw CorpusError(path + ": cannot rename into place");
}

bool is_corpus(const std::string& dir) { return fs::is_regular_file(fs::path(dir) / "corpus.json"); }

Corpus read_corpus(const std::string& dir) {
  const std::string path = dir + "/corpus.json";
  std::string text;
  try {
    text = read_input_file(path, kMaxCorpusFileBytes, "the corpus");
  } catch (const InputError& e) {
    throw CorpusError(e.what());
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw CorpusError(path + ": not a JSON object");
  Corpus c;
  try {
    c.version = j.at("corpus_version").get<int>();
    if (c.version != kCorpusVersion)
      throw CorpusError(fmt::format("{}: corpus_version {} (this flatline reads {})", path, c.version, kCorpusVersion));
    c.id = j.at("id").get<std::string>();
    c.created = j.value("created", "");
    c.flatline = j.value("flatline", "");
    for (const auto& jr : j.at("runs")) {
      CorpusRun r;
      r.name = jr.at("name").get<std::string>();
      // a run is a directory of the corpus: one path component, never "..", never absolute
      try {
        check_path_component(r.name, "run name", path);
      } catch (const InputError& e) {
        throw CorpusError(e.what());
      }
      if (c.runs.size() >= kMaxCorpusRuns)
        throw CorpusError(fmt::format("{}: more than {} runs", path, kMaxCorpusRuns));
      r.hash = jr.at("hash").get<std::string>();
      for (auto it = jr.at("files").begin(); it != jr.at("files").end(); ++it) {
        // a file of the run, relative and inside it (it is compared with what hashing the run finds)
        const std::string& f = it.key();
        if (f.empty() || f.front() == '/' || f.find("..") != std::string::npos || f.find('\0') != std::string::npos)
          throw CorpusError(fmt::format("{}: run {}: file '{}' is not a path inside the run", path, r.name,
                                        f.substr(0, 80)));
        r.files.emplace_back(f, it.value().get<std::string>());
      }
      c.runs.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CorpusError(path + ": bad field: " + e.what());
  }
  // Verify: the files on disk now against the recorded hashes.
  for (const auto& r : c.runs) {
    const CorpusRun now = hash_run(dir, r.name);
    for (const auto& [p, h] : r.files) {
      const std::string& file = p;  // a lambda may not capture a structured binding before C++20 (clang)
      auto it = std::find_if(now.files.begin(), now.files.end(), [&](const auto& f) { return f.first == file; });
      if (it == now.files.end()) throw CorpusError(fmt::format("{}: run {}: {} is missing", path, r.name, p));
      if (it->second != h)
        throw CorpusError(fmt::format("{}: run {}: {} changed since it was recorded (hash {}, recorded {})", path,
                                      r.name, p, it->second, h));
    }
    for (const auto& f_now : now.files)
      if (std::none_of(r.files.begin(), r.files.end(), [&](const auto& f) { return f.first == f_now.first; }))
        throw CorpusError(fmt::format("{}: run {}: {} was not in the recording", path, r.name, f_now.first));
    if (run_hash(r) != r.hash) throw CorpusError(fmt::format("{}: run {}: recorded hash does not match its files", path, r.name));
  }
  if (corpus_id(c.runs) != c.id) throw CorpusError(path + ": the corpus id does not match its runs");
  return c;
}

}  // namespace flatline
