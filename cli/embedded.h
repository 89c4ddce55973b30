// Scenario files compiled into the binary by cli/embed_scenarios.cmake: (path relative to the source
// tree, YAML text), sorted by path. embedded_scenarios(): the default suite (scenarios/main/*.yaml);
// drill_scenarios(): what `flatline drill` simulates (scenarios/drill/*.yaml).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace flatline {
const std::vector<std::pair<std::string, std::string>>& embedded_scenarios();
const std::vector<std::pair<std::string, std::string>>& drill_scenarios();
}
