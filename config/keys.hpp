// The config file's key paths, for tools and tests that check documentation
// (config/reference.yaml) against the schema the loader enforces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace idemgate::config {

// Every key the loader accepts, as dotted paths with "[]" for list items:
// "listen", "tools[].reconcile.query.url", ...
std::vector<std::string> known_key_paths();

// The keys written in `yaml`, in the same form (list indexes as "[]").
// Keys the schema does not know are not listed (they are load errors).
std::vector<std::string> written_key_paths(std::string_view yaml);

}  // namespace idemgate::config
