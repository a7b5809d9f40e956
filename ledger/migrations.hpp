// The versioned schema migrations of both backends, embedded in the binary at
// build time from ledger/migrations/<backend>/NNNN_name.sql (see
// ledger/CMakeLists.txt), so a deployed binary needs no source tree.
#pragma once

#include <span>
#include <string_view>

namespace idemgate::ledger {

struct Migration {
  int version;            // NNNN of the file name; versions are 1, 2, 3...
  std::string_view name;  // the file name
  std::string_view sql;   // one script, applied in one transaction
};

// In version order.
std::span<const Migration> sqlite_migrations() noexcept;
std::span<const Migration> postgresql_migrations() noexcept;

inline int latest_version(std::span<const Migration> migrations) noexcept {
  return migrations.empty() ? 0 : migrations.back().version;
}

}  // namespace idemgate::ledger
