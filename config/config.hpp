// The validated configuration: plain structs, immutable once loaded and shared
// by std::shared_ptr<const Config>. yaml-cpp types never leave config/.
#pragma once

#include "policy/match.hpp"
#include "policy/proxy_auth.hpp"
#include "policy/tool.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::config {

using policy::Duration;

struct Endpoint {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;
};

// Where escalation packages are POSTed as they are persisted (optional).
struct Notify {
  std::string url;     // http:// or https://; empty: no notification
  std::string secret;  // HMAC-SHA256 key for the Idemgate-Signature header
};

struct Admin {
  bool enabled = false;  // true when admin.listen is written in the file
  Endpoint listen{"127.0.0.1", 8081};
  std::string token_file;  // empty: no token (refused on a non-loopback address)
  Notify notify;
};

struct Auth {
  policy::AuthMode mode = policy::AuthMode::off;
  std::string users_file;                 // NAME:pbkdf2-sha256$... lines (idemgate auth add-user)
  std::vector<policy::UserEntry> users;   // read from users_file at load (and on every reload)
};

struct Ledger {
  std::string url = "sqlite:./var/ledger.db";
  int pool_size = 4;                    // PostgreSQL connections (one per worker thread)
  int queue_limit = 1024;               // pending operations before ledger_busy
  Duration statement_timeout = std::chrono::seconds(5);
  // How long the network thread polls for a lone admission's answer before
  // it waits in its event loop (PostgreSQL; 0ms: never). See docs/ledger.md.
  Duration admit_spin = std::chrono::milliseconds(1);
  // How long an outcome recorded after its answer waits for others to share
  // its commit (PostgreSQL with pool_size 3 or more; 0ms: none). See
  // docs/ledger.md.
  Duration outcome_gather = std::chrono::milliseconds(20);
  std::uint64_t response_cap = 256 * 1024;  // stored response bytes for replay
  // The HMAC key of fingerprints; empty: fingerprint.key beside a SQLite
  // ledger file, ./var/fingerprint.key for PostgreSQL. Created 0600 if missing.
  std::string fingerprint_key_file;
};

struct Tls {
  bool intercept = false;
  std::string ca_cert = "./var/ca.pem";
  std::string ca_key = "./var/ca.key";
  std::string upstream_ca_file;  // added to the system trust store
  std::vector<std::string> intercept_hosts;
  std::uint32_t leaf_cache = 1024;
};

struct Runs {
  std::string header = "Idemgate-Run";
  std::uint32_t budget = 200;  // matched calls per run
};

struct Egress {
  std::vector<std::string> allow_hosts{"*"};
  bool allow_private = false;
  bool allow_loopback = false;
};

struct Timeouts {
  Duration client_header = std::chrono::seconds(10);
  Duration upstream_connect = std::chrono::seconds(5);
  Duration upstream_response = std::chrono::seconds(30);
  Duration idle = std::chrono::seconds(60);
  Duration drain = std::chrono::seconds(30);  // grace for in-flight requests on SIGTERM
  // Part of an attempt's lease: how long recording its outcome may take
  // after the answer (or its absence) is known.
  Duration outcome_record = std::chrono::seconds(10);
};

struct Limits {
  std::uint64_t header_bytes = 64 * 1024;
  std::uint64_t request_line = 8 * 1024;
  std::uint64_t inspect_body = 1024 * 1024;
  std::uint64_t request_body = 0;  // 0: unlimited (streamed)
  std::uint32_t upstream_pool = 256;  // idle upstream connections kept per host:port per thread
  std::uint32_t max_connections = 100000;
  // Body bytes of one guarded answer held in memory; the rest streams on
  // to the client (and the stored copy is marked truncated).
  std::uint64_t guarded_answer = 1024 * 1024;
  // All guarded request bodies and answer buffers at once, process-wide, as
  // they are held (an answer buffer grows as the answer arrives); a new
  // guarded call that does not fit gets 503 overloaded before anything is
  // sent, and an answer that cannot grow its buffer further streams on.
  std::uint64_t guarded_budget = 256ull * 1024 * 1024;
};

struct Redact {
  // Besides the default credential headers (Authorization, Proxy-Authorization,
  // Cookie, Set-Cookie, X-Api-Key, Api-Key, X-Auth-Token, ...; ledger/redact.cpp).
  std::vector<std::string> headers;
  std::vector<std::string> body;   // JSON pointers
  // Query parameter names besides the default credential names (api_key,
  // key, token, access_token, secret, password, signature, sig, ...).
  std::vector<std::string> query;
};

struct Route {
  std::string prefix;    // "/stripe/"
  std::string upstream;  // "https://api.stripe.com/"
};

struct Config {
  std::string source_path;  // the file it came from
  Endpoint listen;
  Admin admin;
  Auth auth;
  Ledger ledger;
  Tls tls;
  Runs runs;
  policy::Unmatched unmatched = policy::Unmatched::pass;
  Egress egress;
  Timeouts timeouts;
  Limits limits;
  Redact redact;
  std::vector<Route> routes;
  std::vector<policy::Tool> tools;
  unsigned threads = 0;  // network threads; 0: one per core
  // `tools` compiled for matching; set on every successfully loaded config.
  // Use tool_table->match(request): the returned pointer lives as long as it.
  std::shared_ptr<const policy::ToolTable> tool_table;
};

struct ConfigError {
  std::string file;
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based; 0 when unknown
  std::string message;
};

// "file:line:column: message"
std::string format(const ConfigError&);

struct LoadResult {
  std::shared_ptr<const Config> config;  // null when errors is not empty
  std::vector<ConfigError> errors;
};

// Reads, parses and validates; every error found is returned, not the first.
LoadResult load_file(const std::string& path);
LoadResult load_string(std::string_view yaml, const std::string& file_name);

}  // namespace idemgate::config
