// The default suite (scenarios/main/*.yaml), compiled into the binary by cli/embed_scenarios.cmake:
// (path relative to the source tree, YAML text), sorted by path.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace flatline {
const std::vector<std::pair<std::string, std::string>>& embedded_scenarios();
}
