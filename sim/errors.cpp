#include "sim/errors.h"

#include <filesystem>

#include "sim/dist.h"
#include "telemetry/jsonl.h"

namespace flatline {

std::string message_of(const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  return c10e ? c10e->what_without_backtrace() : e.what();
}

std::optional<RankError::Kind> recoverable_kind(const std::exception& e) {
  if (auto* r = dynamic_cast<const RankError*>(&e)) return r->kind();
  if (dynamic_cast<const CommError*>(&e)) return RankError::Kind::comm;
  if (dynamic_cast<const IoError*>(&e) || dynamic_cast<const std::filesystem::filesystem_error*>(&e))
    return RankError::Kind::io;
  return std::nullopt;
}

}  // namespace flatline
