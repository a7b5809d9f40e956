// The credential forwarding rule (see credentials.hpp).
#include "policy/credentials.hpp"

#include "policy/egress.hpp"

#include <algorithm>

namespace idemgate::policy {
namespace {

bool iequal(std::string_view a, std::string_view b) noexcept {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [&](char x, char y) { return lower(x) == lower(y); });
}

std::string_view bare(std::string_view host) noexcept {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.size() > 1 && host.back() == '.') host.remove_suffix(1);
  return host;
}

bool is_loopback(std::string_view host) noexcept {
  if (iequal(host, "localhost")) return true;
  try {
    // Only the loopback range is allowed: private ranges are not "this machine".
    return !check_address(host, AddressRules{false, false}).allowed && check_address(host, AddressRules{false, true}).allowed;
  } catch (...) {
    return false;
  }
}

}  // namespace

bool may_forward_credentials(const Tool& tool, std::string_view request_host, std::string_view query_scheme,
                             std::string_view query_host) noexcept {
  const auto host = bare(query_host);
  if (host.empty()) return false;
  const bool own_host = iequal(host, bare(request_host)) ||
                        (!tool.match.host.empty() && tool.match.host.find('*') == std::string::npos &&
                         iequal(host, tool.match.host));
  if (!own_host) return false;
  if (iequal(query_scheme, "https")) return true;
  return iequal(query_scheme, "http") && is_loopback(host);
}

}  // namespace idemgate::policy
