// Writing and reading secret files (see secret_file.hpp).
#include "tls/secret_file.hpp"

#include <openssl/rand.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace idemgate::tls {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void sync_dir(const fs::path& dir) {
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
  if (d.fd >= 0) ::fsync(d.fd);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 64 hex digits are the 32 bytes they spell; any other text is the key as is.
std::string key_from_text(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.size() != 64) return text;
  std::string bytes;
  for (std::size_t i = 0; i < 64; i += 2) {
    const int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) return text;
    bytes += static_cast<char>(hi * 16 + lo);
  }
  return bytes;
}

}  // namespace

std::string place_file(const fs::path& target, std::string_view data, mode_t mode, bool replace) {
  static std::atomic<unsigned> counter{0};
  fs::path temp;
  Fd out;
  for (int tries = 0; out.fd < 0 && tries < 16; ++tries) {
    temp = target;
    temp += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    out.fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (out.fd < 0 && errno != EEXIST) break;
  }
  if (out.fd < 0) return "cannot create " + temp.string() + ": " + errno_text(errno);

  // umask may have narrowed `mode`; a key must be exactly owner read/write.
  if (::fchmod(out.fd, mode) != 0 || !write_all(out.fd, data) || ::fsync(out.fd) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return "cannot write " + temp.string() + ": " + errno_text(err);
  }
  int placed = replace ? ::rename(temp.c_str(), target.c_str()) : ::link(temp.c_str(), target.c_str());
  int err = errno;
  if (!replace || placed != 0) ::unlink(temp.c_str());
  if (placed != 0) {
    if (err == EEXIST) return target.string() + " already exists; pass --force to replace it";
    return "cannot write " + target.string() + ": " + errno_text(err);
  }
  sync_dir(target.parent_path().empty() ? fs::path(".") : target.parent_path());
  return {};
}

SecretKey load_or_create_key(const fs::path& path) {
  SecretKey out;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1) {
      out.error = "no random bytes for a new key";
      return out;
    }
    static constexpr char digits[] = "0123456789abcdef";
    std::string hex;
    for (unsigned char c : raw) {
      hex += digits[c >> 4];
      hex += digits[c & 0xf];
    }
    hex += '\n';
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    auto const why = place_file(path, hex, 0600, false);
    if (why.empty()) {
      out.bytes = key_from_text(hex);
      out.created = true;
      return out;
    }
    // Another process may have placed it first: then its key is read below.
    if (!fs::exists(path, ec)) {
      out.error = why;
      return out;
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.error = "cannot read " + path.string() + ": " + errno_text(errno);
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  out.bytes = key_from_text(text.str());
  if (out.bytes.size() < 32) {
    out.bytes.clear();
    out.error = path.string() + " holds fewer than 32 bytes of key: put 64 hex digits in it (or delete it to have "
                                "a new key generated)";
  }
  return out;
}

}  // namespace idemgate::tls
