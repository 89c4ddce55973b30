// The rank files of a flatline run directory (rank-<r>.jsonl, docs/DESIGN.md §3) read side by side:
// what read_log's merge (reader.cpp) and LogStream (log_stream.cpp) share. Internal to readers/.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "readers/text_util.h"
#include "telemetry/jsonl.h"

namespace flatline::rank_files {

constexpr size_t kStreamBudget = size_t{128} << 20;  // bytes of chunks over all files
constexpr size_t kMinChunk = 64 << 10, kMaxChunk = 128 << 10;  // reused buffers: touched once; a chunk and
                                                                // its ~330 records stay in a core's cache

// A reader of one of `n_files` rank files read side by side: its chunk the budget's share, clamped, and
// no bigger than the file itself. *size (when given): the file's size in bytes, nullopt when it could
// not be read. Throws what JsonlReader throws (InputError for a FIFO, a link, ...).
inline std::unique_ptr<JsonlReader> open_reader(const std::string& path, size_t n_files,
                                                std::optional<uint64_t>* size = nullptr) {
  const size_t chunk = std::clamp(kStreamBudget / std::max<size_t>(n_files, 1), kMinChunk, kMaxChunk);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (size) *size = ec ? std::nullopt : std::optional<uint64_t>(bytes);
  return std::make_unique<JsonlReader>(path, ec ? chunk : std::min<size_t>(chunk, static_cast<size_t>(bytes) + 1));
}

// A Record moved from, made a default one again for JsonlReader::next_record: destroyed and
// default-constructed in place (a few stores), where `r = Record()` built a temporary and move-assigned
// it field by field (~300 instructions a record, as much as the move itself).
inline void reset(Record& r) noexcept {
  r.~Record();
  ::new (static_cast<void*>(&r)) Record;  // (not Record(): value-initialisation zero-fills all 400 bytes first)
}

// The heap of files (std::make_heap's, by `later`: a strict order, the earliest file on top) restored
// after its top file moved on to its next record or was replaced by the last: one pass down, where
// std::pop_heap and std::push_heap take two.
template <class Later>
void sift_top(std::vector<size_t>& heap, Later later) {
  const size_t n = heap.size(), top = heap[0];
  size_t i = 0;
  for (size_t c = 1; c < n; c = 2 * i + 1) {
    if (c + 1 < n && later(heap[c], heap[c + 1])) ++c;  // the earlier child
    if (!later(top, heap[c])) break;
    heap[i] = heap[c];
    i = c;
  }
  heap[i] = top;
}

// A rank file's rank, from its name (rank-<r>.jsonl).
inline std::optional<int64_t> named_rank(const std::string& path) {
  const std::string n = std::filesystem::path(path).stem().string();
  return n.rfind("rank-", 0) == 0 ? readers::parse_integer(n.substr(5)) : std::nullopt;
}

// The warning for records of another rank found in a rank's file (they are kept with the rank they name).
inline std::string other_rank_warning(const std::string& file, int64_t count, int rank, int64_t named) {
  return fmt::format("{}: {} record(s) of rank {} in the file of rank {} (kept with the rank they name)", file, count,
                     rank, named);
}

}  // namespace flatline::rank_files
