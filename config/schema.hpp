// Internal to config/: the field tables that define every accepted key of the
// config file (the documented keys plus the operational keys of config.hpp).
#pragma once

#include "config/yaml_reader.hpp"

namespace idemgate::config::detail {

const Fields<Config>& config_fields();

}  // namespace idemgate::config::detail
