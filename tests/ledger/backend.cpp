// The per-test databases of the conformance suite (see backend.hpp).
#include "backend.hpp"

#include "ledger/open_store.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace idemgate::ledger::test {
namespace {

std::string random_suffix() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex << rd() << rd();
  return out.str();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a command, returns its stdout; FAILs the test when it exits non-zero.
std::string capture(const std::string& command) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "cannot run " << command);
  char buffer[4096];
  while (auto n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  int status = pclose(pipe);
  REQUIRE_MESSAGE(status == 0, command << " failed: " << out);
  return out;
}

class SqliteBackend final : public Backend {
 public:
  SqliteBackend() {
    char pattern[] = "/tmp/idemgate-ledger-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    dir_ = pattern;
    config.url = "sqlite:" + dir_ + "/ledger.db";
    config.statement_timeout = std::chrono::seconds(5);
  }
  ~SqliteBackend() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string name() const override { return "sqlite"; }

  std::string query(const std::string& sql) override {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open((dir_ + "/ledger.db").c_str(), &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    std::string out;
    char* error = nullptr;
    int rc = sqlite3_exec(
        db, sql.c_str(),
        [](void* sink, int n, char** values, char**) {
          for (int i = 0; i < n; ++i) {
            *static_cast<std::string*>(sink) += values[i] ? values[i] : "";
            *static_cast<std::string*>(sink) += '\n';
          }
          return 0;
        },
        &out, &error);
    std::string message = error ? error : "";
    sqlite3_free(error);
    sqlite3_close(db);
    REQUIRE_MESSAGE(rc == SQLITE_OK, sql << ": " << message);
    return out;
  }

  std::string dump() override {
    std::string bytes;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      std::ifstream in(entry.path(), std::ios::binary);
      bytes.append(std::istreambuf_iterator<char>(in), {});
    }
    return bytes;
  }

 private:
  std::string dir_;
};

class PostgresqlBackend final : public Backend {
 public:
  explicit PostgresqlBackend(std::string base) : base_(std::move(base)) {
    database_ = "idemgate_t_" + random_suffix();
    psql(base_, "CREATE DATABASE " + database_);
    auto url = boost::urls::parse_uri(base_);
    REQUIRE(url.has_value());
    boost::urls::url own = *url;
    own.set_path("/" + database_);
    config.url = std::string(own.buffer());
    config.pool_size = 4;
    config.statement_timeout = std::chrono::seconds(5);
  }
  ~PostgresqlBackend() override {
    std::system(("psql -X -q -d " + shell_quote(base_) + " -c " +
                 shell_quote("DROP DATABASE IF EXISTS " + database_ + " WITH (FORCE)") +
                 " >/dev/null 2>&1")
                    .c_str());
  }
  std::string name() const override { return "postgresql"; }
  std::string query(const std::string& sql) override { return psql(config.url, sql); }

  std::string dump() override {
    std::string text;
    auto tables = query("SELECT table_name FROM information_schema.tables WHERE "
                        "table_schema = 'public' AND table_type = 'BASE TABLE'");
    std::istringstream lines(tables);
    for (std::string table; std::getline(lines, table);) {
      if (table.empty()) continue;
      text += query("SELECT t::text FROM " + table + " t");
      auto binary = query("SELECT column_name FROM information_schema.columns WHERE "
                          "table_name = '" + table + "' AND data_type = 'bytea'");
      std::istringstream columns(binary);
      for (std::string column; std::getline(columns, column);)
        if (!column.empty())
          text += query("SELECT encode(" + column + ", 'escape') FROM " + table);
    }
    return text;
  }

 private:
  static std::string psql(const std::string& url, const std::string& sql) {
    return capture("psql -X -q -At -v ON_ERROR_STOP=1 -d " + shell_quote(url) + " -c " +
                   shell_quote(sql));
  }

  std::string base_;
  std::string database_;
};

}  // namespace

std::unique_ptr<Backend> sqlite_backend() { return std::make_unique<SqliteBackend>(); }

std::unique_ptr<Backend> postgresql_backend() {
  const char* base = std::getenv("IDEMGATE_TEST_PG");
  if (!base || !*base)
    FAIL("IDEMGATE_TEST_PG is not set: PostgreSQL cases (label db) run through scripts/test, "
         "or exclude them with ctest -LE db");
  return std::make_unique<PostgresqlBackend>(base);
}

std::unique_ptr<Ledger> open_ledger(Backend& backend, const std::string& replica,
                                    const config::Redact& redact) {
  auto ledger = Ledger::open(backend.config, redact, replica);
  REQUIRE_MESSAGE(ledger.has_value(), backend.name() << ": cannot open the ledger: "
                                                      << ledger.error().message());
  return std::move(*ledger);
}

ReserveRequest reserve_request(const std::string& fingerprint, const std::string& key,
                               const std::string& run) {
  ReserveRequest r;
  r.run = run;
  r.tool = "stripe.create_charge";
  r.scope = run;
  r.fingerprint = fingerprint;
  r.key = key;
  return r;
}

AttemptRequest attempt_now(Ledger& ledger, std::int64_t intent_id, int max_attempts, Millis lease) {
  auto intent = run(ledger.find_intent(intent_id));
  REQUIRE_MESSAGE(intent.has_value(), intent.error().message());
  return AttemptRequest{intent_id, intent->state, intent->attempts, max_attempts, lease};
}

AttemptRequest attempt_now(Store& store, std::int64_t intent_id, int max_attempts, Millis lease) {
  auto intent = store.find_intent(intent_id);
  REQUIRE_MESSAGE(intent.has_value(), intent.error().message());
  return AttemptRequest{intent_id, intent->state, intent->attempts, max_attempts, lease};
}

std::unique_ptr<Store> open_store(Backend& backend) {
  auto stores = open_stores(backend.config);
  REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
  return std::move(stores->front());
}

std::unique_ptr<Store> migrated_store(Backend& backend) {
  REQUIRE(migrate(backend.config).has_value());
  return open_store(backend);
}

AdmitRequest admit_request(const std::string& fp, const std::string& key, std::int64_t budget,
                           const std::string& run) {
  return AdmitRequest{reserve_request(fp, key, run), budget, FirstAttempt{3, Millis(60000)}};
}

std::int64_t reserve(Store& store, const std::string& fp) {
  auto request = reserve_request(fp, "key-" + fp);
  auto r = store.reserve_intents({&request, 1}).front();
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  return r->intent.id;
}

Outcome completed(std::int64_t id, int attempt) {
  Outcome o;
  o.intent_id = id;
  o.attempt = attempt;
  o.state = IntentState::completed;
  o.answer_class = "ok";
  o.status = 200;
  o.receipt = "r-" + std::to_string(id);
  return o;
}

}  // namespace idemgate::ledger::test
