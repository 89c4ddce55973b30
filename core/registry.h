// A registry of named definitions that fill it themselves, one file per entry: the fault kinds
// (faults/fault.h), the repairs (faults/intervention.h), the detectors (detectors/registry.h), the log
// readers (readers/registry.h) and the subcommands (cli/command.h). Each file's static initialiser adds
// its entry (flatline_core is a shared library, so the linker keeps every one); whoever needs one looks
// it up by name.
//
// One rule for a name registered twice: a broken invariant (FLATLINE_CHECK, core/check.h). A registrar
// runs before main(), so the InvariantError ends the program at start-up with the file, the line and the
// name, rather than one entry silently shadowing the other.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"

namespace flatline {

template <class Def>
class Registry {
 public:
  explicit Registry(const char* what) : what_(what) {}
  // Adds `def` under `name` and returns it as stored (its address never changes).
  const Def& add(const std::string& name, Def def) {
    FLATLINE_CHECK(!defs_.count(name), "{} '{}' registered twice", what_, name);
    return defs_.emplace(name, std::move(def)).first->second;
  }
  const Def* find(std::string_view name) const {  // nullptr when none has that name
    auto it = defs_.find(name);
    return it == defs_.end() ? nullptr : &it->second;
  }
  bool has(std::string_view name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> out;
    for (const auto& [name, _] : defs_) out.push_back(name);
    return out;
  }
  size_t size() const { return defs_.size(); }
  auto begin() const { return defs_.begin(); }  // (name, Def) in name order
  auto end() const { return defs_.end(); }

 private:
  const char* what_;
  std::map<std::string, Def, std::less<>> defs_;
};

}  // namespace flatline
