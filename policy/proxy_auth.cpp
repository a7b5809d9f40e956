// Basic credentials and PBKDF2 user entries (see proxy_auth.hpp).
#include "policy/proxy_auth.hpp"

#include "policy/percent.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <charconv>

namespace idemgate::policy {
namespace {

constexpr std::string_view scheme_prefix = "pbkdf2-sha256$";

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 0xf];
  }
  return out;
}

std::optional<std::string> pbkdf2(std::string_view password, std::string_view salt, unsigned iterations) {
  std::string out(32, '\0');
  if (PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                        reinterpret_cast<const unsigned char*>(salt.data()), static_cast<int>(salt.size()),
                        static_cast<int>(iterations), EVP_sha256(), static_cast<int>(out.size()),
                        reinterpret_cast<unsigned char*>(out.data())) != 1)
    return std::nullopt;
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] != '='; ++i) {
    const auto v = alphabet.find(text[i]);
    if (v == std::string_view::npos) return std::nullopt;
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  for (; i < text.size(); ++i)
    if (text[i] != '=') return std::nullopt;
  return out;
}

}  // namespace

std::optional<BasicCredentials> parse_basic(std::string_view value) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (value.size() < 6) return std::nullopt;
  const auto scheme = value.substr(0, 6);
  bool basic = true;
  for (std::size_t i = 0; i < 5; ++i) basic = basic && (scheme[i] | 0x20) == "basic"[i];
  if (!basic || scheme[5] != ' ') return std::nullopt;
  auto token = value.substr(6);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  const auto decoded = base64_decode(token);
  if (!decoded) return std::nullopt;
  const auto colon = decoded->find(':');
  if (colon == std::string::npos) return std::nullopt;
  return BasicCredentials{decoded->substr(0, colon), decoded->substr(colon + 1)};
}

std::optional<std::string> user_name_error(std::string_view name) {
  if (name.empty() || name.size() > 128) return "a user name is 1 to 128 bytes";
  for (unsigned char c : name) {
    if (c == ':') return "a user name cannot hold ':'";
    if (c < 0x21 || c == 0x7f) return "a user name cannot hold spaces or control characters";
  }
  return std::nullopt;
}

std::variant<UserEntry, std::string> parse_user_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return std::string("expected NAME:pbkdf2-sha256$ITERATIONS$SALT$HASH");
  UserEntry entry;
  entry.name = std::string(line.substr(0, colon));
  if (auto why = user_name_error(entry.name)) return *why;
  auto rest = line.substr(colon + 1);
  if (!rest.starts_with(scheme_prefix))
    return std::string("unknown hash scheme (expected pbkdf2-sha256$...; create entries with idemgate auth add-user)");
  rest.remove_prefix(scheme_prefix.size());
  const auto d1 = rest.find('$');
  const auto d2 = d1 == std::string_view::npos ? d1 : rest.find('$', d1 + 1);
  if (d2 == std::string_view::npos) return std::string("expected ITERATIONS$SALT$HASH after pbkdf2-sha256$");
  const auto iterations = rest.substr(0, d1);
  auto [end, ec] = std::from_chars(iterations.data(), iterations.data() + iterations.size(), entry.iterations);
  if (ec != std::errc{} || end != iterations.data() + iterations.size() || entry.iterations < 1000 ||
      entry.iterations > 10'000'000)
    return std::string("iterations must be a number from 1000 to 10000000");
  auto salt = from_hex(rest.substr(d1 + 1, d2 - d1 - 1));
  auto hash = from_hex(rest.substr(d2 + 1));
  if (!salt || salt->size() < 8) return std::string("the salt must be at least 8 bytes in hex");
  if (!hash || hash->size() != 32) return std::string("the hash must be 32 bytes in hex");
  entry.salt = std::move(*salt);
  entry.hash = std::move(*hash);
  entry.line = std::string(line);
  return entry;
}

std::string make_user_line(std::string_view name, std::string_view password, std::string_view salt,
                           unsigned iterations) {
  const auto hash = pbkdf2(password, salt, iterations);
  if (!hash) return {};
  return std::string(name) + ":" + std::string(scheme_prefix) + std::to_string(iterations) + "$" + to_hex(salt) +
         "$" + to_hex(*hash);
}

bool verify_password(const UserEntry& entry, std::string_view password) noexcept {
  try {
    const auto hash = pbkdf2(password, entry.salt, entry.iterations);
    return hash && hash->size() == entry.hash.size() &&
           CRYPTO_memcmp(hash->data(), entry.hash.data(), hash->size()) == 0;
  } catch (...) {
    return false;
  }
}

const UserEntry* find_user(const std::vector<UserEntry>& users, std::string_view name) noexcept {
  for (const auto& u : users)
    if (u.name == name) return &u;
  return nullptr;
}

}  // namespace idemgate::policy
