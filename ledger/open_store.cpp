// Backend selection by URL (see open_store.hpp).
#include "ledger/open_store.hpp"

#include "ledger/pg_direct.hpp"
#include "ledger/pg_store.hpp"
#include "ledger/sqlite_store.hpp"

#include <algorithm>
#include <filesystem>

namespace idemgate::ledger {

Result<std::vector<std::unique_ptr<Store>>> open_stores(const config::Ledger& config) {
  std::vector<std::unique_ptr<Store>> stores;
  const std::string& url = config.url;
  if (url.starts_with("sqlite:")) {
    // The default ./var/ledger.db must work on a fresh checkout.
    std::filesystem::path path(url.substr(7));
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    auto store = SqliteStore::open(path.string(), config.statement_timeout);
    if (!store) return store.error();
    stores.push_back(std::move(*store));
  } else if (url.starts_with("postgresql://") || url.starts_with("postgres://")) {
    for (int i = 0; i < std::max(1, config.pool_size); ++i)
      stores.push_back(std::make_unique<PgStore>(url, config.statement_timeout));
  } else {
    return boost::system::error_code(errc::invalid_argument);
  }
  return stores;
}

std::unique_ptr<DirectAdmit> open_direct_admit(const config::Ledger& config) {
  if (!config.url.starts_with("postgresql://") && !config.url.starts_with("postgres://")) return nullptr;
  return std::make_unique<PgDirectAdmit>(config.url, config.statement_timeout, config.admit_spin);
}

std::string fingerprint_key_path(const config::Ledger& config) {
  if (!config.fingerprint_key_file.empty()) return config.fingerprint_key_file;
  if (config.url.starts_with("sqlite:")) {
    const std::filesystem::path db(config.url.substr(7));
    return (db.has_parent_path() ? db.parent_path() / "fingerprint.key" : std::filesystem::path("fingerprint.key")).string();
  }
  return "./var/fingerprint.key";
}

Result<int> migrate(const config::Ledger& config) {
  auto single = config;
  single.pool_size = 1;
  auto stores = open_stores(single);
  if (!stores) return stores.error();
  return stores->front()->migrate();
}

}  // namespace idemgate::ledger
