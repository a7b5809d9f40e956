// Checks that need more than one key at a time (or knowledge of what a value
// means): run after the file has been read into plain structs.
#pragma once

#include "config/config.hpp"
#include "config/source_map.hpp"

#include <vector>

namespace idemgate::config {

// Brings values to their canonical form before validation and matching:
// hosts lowercase, methods uppercase.
void normalise(Config& config);

// Appends one error per problem found; never stops at the first.
void validate(const Config& config, const SourceMap& positions, std::vector<ConfigError>& errors);

}  // namespace idemgate::config
