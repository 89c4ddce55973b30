// Reading one field of a JSON object that a person or another program wrote (a diagnosis.json, a
// repair file): absent or null leaves the value as it is; a value of the wrong type is a
// std::runtime_error naming the source and the field, never an exception of the JSON library.
#pragma once
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace flatline {

// True when the field was there (and read).
template <class T>
bool json_field(const nlohmann::json& j, const char* name, T& out, const std::string& source) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return false;
  try {
    it->get_to(out);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(fmt::format("{}: \"{}\" has the wrong type ({})", source, name, it->type_name()));
  }
  return true;
}

}  // namespace flatline
