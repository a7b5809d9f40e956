// Names for the ledger's error codes, as they appear in logs and problem
// details.
#include "ledger/errc.hpp"

#include <string>

namespace idemgate::ledger {
namespace {

class Category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "idemgate.ledger"; }

  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::busy: return "ledger busy";
      case errc::unavailable: return "ledger unavailable";
      case errc::conflict: return "concurrent update conflict";
      case errc::illegal_transition: return "illegal state transition";
      case errc::not_found: return "not found";
      case errc::newer_schema: return "database schema is newer than this binary";
      case errc::invalid_argument: return "invalid argument";
      case errc::storage_failure: return "storage failure";
      case errc::shutting_down: return "ledger shutting down";
      case errc::queue_full: return "ledger queue full";
      case errc::old_server: return "PostgreSQL server older than 14, the oldest the ledger supports";
    }
    return "unknown ledger error";
  }
};

}  // namespace

const boost::system::error_category& ledger_category() noexcept {
  static const Category category;
  return category;
}

}  // namespace idemgate::ledger
