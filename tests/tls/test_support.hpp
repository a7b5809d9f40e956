// Helpers shared by the tls tests: a temporary directory that cleans up
// after itself, a CA created in one, and PEM reading for parse-back checks.
#pragma once

#include "tls/ca.hpp"

#include <openssl/pem.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace idemgate::tls::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "idemgate-tls-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline X509Ptr read_cert(const std::filesystem::path& p) {
  BioPtr bio(BIO_new_file(p.c_str(), "r"));
  return X509Ptr(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

// A CA freshly created in its own directory and loaded back.
struct TestCa {
  TempDir dir;
  CaFiles files;
  CaPtr ca;

  TestCa() {
    auto created = create_ca(dir.path(), false);
    if (!created.ok()) throw std::runtime_error(created.error);
    files = created.value;
    auto loaded = load_ca(files.cert, files.key);
    if (!loaded.ok()) throw std::runtime_error(loaded.error);
    ca = loaded.value;
  }
};

}  // namespace idemgate::tls::test
