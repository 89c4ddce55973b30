// The two error tiers of a rank (docs/DESIGN.md §9; torch-free): RankError, the recoverable failure of a
// rank, of one kind; which exceptions are one; and the message a person reads. Anything else is a bug
// (sim/trainer.h).
#pragma once
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

namespace flatline {

class RankError : public std::runtime_error {
 public:
  enum class Kind { comm, io, checkpoint, device };  // device: the GPUs the scenario asks for are not there
  RankError(Kind k, const std::string& what) : std::runtime_error(what), kind_(k) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// The message alone: c10 errors carry a C++ backtrace after it.
std::string message_of(const std::exception& e);

// The recoverable failures of a rank: a collective (CommError, sim/dist.h), the file system (IoError,
// telemetry/jsonl.h; std::filesystem), a checkpoint or a device (already a RankError). nullopt: a bug.
std::optional<RankError::Kind> recoverable_kind(const std::exception& e);

}  // namespace flatline
