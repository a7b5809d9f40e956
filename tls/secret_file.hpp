// Secrets on disk: files only their owner can read, never seen half-written
// (the CA key, the fingerprint key, the proxy users file).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace idemgate::tls {

// Puts `data` at `target` with `mode` such that no other user can ever read
// it and no reader ever sees it half-written: the bytes go to a temp file
// beside it created O_EXCL with `mode` from the start, are fsynced, then
// link()ed into place (fails if target exists) or, to replace, rename()d.
// Returns what went wrong, empty on success.
std::string place_file(const std::filesystem::path& target, std::string_view data, mode_t mode, bool replace);

struct SecretKey {
  std::string bytes;  // the key; empty on error
  std::string error;  // why it could not be read or created
  bool created = false;
};

// The key in `path` (64 hex digits and a newline, or any text of at least 32
// bytes a user put there), or a new random 32-byte one written there with
// mode 0600 (its directory created) when the file does not exist. Two
// processes starting at once both end up with the same key: the loser of
// the link() race reads the winner's file.
SecretKey load_or_create_key(const std::filesystem::path& path);

}  // namespace idemgate::tls
