// Operator commands on the ledger (see ops_cli.hpp).
#include "proxy/ops_cli.hpp"

#include "config/config.hpp"
#include "ledger/ledger.hpp"
#include "ledger/open_store.hpp"
#include "proxy/ops.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include <charconv>
#include <map>
#include <ostream>
#include <string>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

struct Args {
  std::vector<std::string_view> positional;
  std::map<std::string, std::string, std::less<>> options;
};

Args split(std::span<const std::string_view> args) {
  Args a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].starts_with("--")) {
      auto eq = args[i].find('=');
      if (eq != std::string_view::npos) {
        a.options[std::string(args[i].substr(2, eq - 2))] = std::string(args[i].substr(eq + 1));
      } else if (i + 1 < args.size()) {
        a.options[std::string(args[i].substr(2))] = std::string(args[i + 1]);
        ++i;
      } else {
        a.options[std::string(args[i].substr(2))] = "";
      }
    } else {
      a.positional.push_back(args[i]);
    }
  }
  return a;
}

// Runs one shared operation (proxy/ops.hpp) to completion and prints it:
// one JSON object per line, or the error on err.
int print(Task<ops::OpResult> operation, std::ostream& out, std::ostream& err) {
  asio::io_context io;
  auto future = asio::co_spawn(io, std::move(operation), asio::use_future);
  io.run();
  auto const r = future.get();
  if (!r.ok()) {
    err << "idemgate: " << (r.status >= 500 ? "ledger: " : "") << r.detail << "\n";
    return r.status == 400 ? 2 : 1;
  }
  if (r.body.is_array()) {
    for (auto const& item : r.body.as_array()) out << json::serialize(item) << "\n";
  } else {
    out << json::serialize(r.body) << "\n";
  }
  return 0;
}

}  // namespace

bool is_ops_command(std::span<const std::string_view> args) {
  if (args.empty()) return false;
  auto c = args[0];
  return c == "ledger" || c == "escalations" || c == "intents" || c == "runs";
}

int run_ops_command(std::span<const std::string_view> raw, std::ostream& out, std::ostream& err) {
  auto a = split(raw);
  auto usage = [&](std::string_view why) {
    err << "idemgate: " << why << "\n"
        << "usage:\n"
           "  idemgate ledger migrate --config FILE\n"
           "  idemgate escalations list [--state open|approved|denied|completed] --config FILE\n"
           "  idemgate escalations resolve ID approve|deny|complete [--receipt R] [--note N] --config FILE\n"
           "  idemgate intents show (--key K | --id N | --run R) --config FILE\n"
           "  idemgate runs show|unfreeze|kill RUN [--reason TEXT] --config FILE\n";
    return 2;
  };
  if (a.positional.size() < 2) return usage("missing subcommand");
  auto cfg_path = a.options.find("config");
  if (cfg_path == a.options.end()) return usage("--config FILE is required");
  auto loaded = config::load_file(cfg_path->second);
  if (!loaded.config) {
    for (auto const& e : loaded.errors) err << config::format(e) << "\n";
    return 2;
  }
  auto const& cfg = *loaded.config;
  auto const group = a.positional[0];
  auto const verb = a.positional[1];

  if (group == "ledger" && verb == "migrate") {
    auto version = ledger::migrate(cfg.ledger);
    if (!version) {
      err << "idemgate: ledger migrate: " << version.error().message() << "\n";
      return 1;
    }
    out << "ok: schema version " << *version << "\n";
    return 0;
  }
  auto stores = ledger::open_stores(cfg.ledger);
  if (!stores || stores->empty()) {
    err << "idemgate: cannot open the ledger: " << (stores ? "no store" : stores.error().message()) << "\n";
    return 1;
  }
  if (auto m = stores->front()->migrate(); !m) {
    err << "idemgate: ledger: " << m.error().message() << "\n";
    return 1;
  }
  ledger::LedgerOptions options;
  options.redact = cfg.redact;
  ledger::Ledger ledger(std::move(*stores), options);

  if (group == "escalations" && verb == "list") {
    std::string state;
    if (auto s = a.options.find("state"); s != a.options.end()) state = s->second;
    return print(ops::list_escalations(ledger, state, 1000), out, err);
  }
  if (group == "escalations" && verb == "resolve") {
    if (a.positional.size() < 4) return usage("resolve needs ID and approve|deny|complete");
    auto id = ops::parse_id(a.positional[2]);
    if (!id) return usage("escalation ID must be a number");
    std::string receipt, note;
    if (auto r = a.options.find("receipt"); r != a.options.end()) receipt = r->second;
    if (auto n = a.options.find("note"); n != a.options.end()) note = n->second;
    return print(ops::resolve_escalation(ledger, *id, std::string(a.positional[3]), receipt, note), out,
                 err);
  }
  if (group == "intents" && verb == "show") {
    if (auto k = a.options.find("key"); k != a.options.end())
      return print(ops::find_intent_by_key(ledger, k->second), out, err);
    if (auto i = a.options.find("id"); i != a.options.end()) {
      auto id = ops::parse_id(i->second);
      if (!id) return usage("--id must be a number");
      return print(ops::show_intent(ledger, *id), out, err);
    }
    if (auto r = a.options.find("run"); r != a.options.end())
      return print(ops::list_intents(ledger, r->second, 1000), out, err);
    return usage("intents show needs --key, --id or --run");
  }
  if (group == "runs" && a.positional.size() >= 3 && (verb == "show" || verb == "unfreeze" || verb == "kill")) {
    std::string reason = a.options.count("reason") ? a.options["reason"] : "by operator";
    return print(ops::run_action(ledger, std::string(a.positional[2]), std::string(verb), reason), out,
                 err);
  }
  return usage("unknown command");
}

}  // namespace idemgate::proxy
