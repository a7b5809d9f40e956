// Chooses the backend from ledger.url: "sqlite:PATH" (the embedded default)
// or "postgresql://..." / "postgres://...". Also what `idemgate ledger
// migrate` calls.
#pragma once

#include "config/config.hpp"
#include "ledger/direct_admit.hpp"
#include "ledger/store.hpp"

#include <memory>
#include <vector>

namespace idemgate::ledger {

// SQLite: one store (one writer thread is all SQLite can use). PostgreSQL:
// config.pool_size stores, each connecting lazily on its first call.
Result<std::vector<std::unique_ptr<Store>>> open_stores(const config::Ledger& config);

// PostgreSQL: the connection a lone admission is sent on from the caller's
// own thread (Ledger::admit_directly), one more than config.pool_size.
// SQLite: none.
std::unique_ptr<DirectAdmit> open_direct_admit(const config::Ledger& config);

// Where the fingerprint key lives: ledger.fingerprint_key_file, else
// fingerprint.key beside a SQLite ledger file, else ./var/fingerprint.key.
std::string fingerprint_key_path(const config::Ledger& config);

// Applies the migrations the database lacks; returns the schema version.
// errc::newer_schema when the database is ahead of this binary;
// errc::old_server when its PostgreSQL server is older than 14.
Result<int> migrate(const config::Ledger& config);

}  // namespace idemgate::ledger
