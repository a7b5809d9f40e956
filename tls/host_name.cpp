// Host name canonicalisation for the leaf cache, SANs, SNI and verification.
#include "tls/host_name.hpp"

#include <arpa/inet.h>

#include <array>
#include <cctype>

namespace idemgate::tls {

namespace {

// inet_pton accepts "::1" and "0:0::1" alike; one spelling per address keeps
// the leaf cache from minting twice for it.
bool canonical_ip(const std::string& text, std::string& out) {
  std::array<unsigned char, 16> bytes{};
  std::array<char, INET6_ADDRSTRLEN> buf{};
  for (int family : {AF_INET, AF_INET6}) {
    if (inet_pton(family, text.c_str(), bytes.data()) == 1 &&
        inet_ntop(family, bytes.data(), buf.data(), buf.size()) != nullptr) {
      out = buf.data();
      return true;
    }
  }
  return false;
}

bool valid_dns_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    bool allowed = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    if (!allowed || ++label > 63) return false;
  }
  return label > 0;
}

}  // namespace

Result<HostName> parse_host(std::string_view host) {
  using R = Result<HostName>;
  std::string text(host);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));

  HostName out;
  if (canonical_ip(text, out.name)) {
    out.is_ip = true;
    return {std::move(out), {}};
  }
  if (!text.empty() && text.back() == '.') text.pop_back();
  if (!valid_dns_name(text))
    return R::failure("'" + std::string(host) + "' is not a host name or IP address");
  out.name = std::move(text);
  return {std::move(out), {}};
}

}  // namespace idemgate::tls
