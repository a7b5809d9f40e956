// Operator commands on the ledger (see ops_cli.hpp).
#include "proxy/ops_cli.hpp"

#include "config/config.hpp"
#include "ledger/open_store.hpp"
#include "ledger/types.hpp"

#include <boost/json.hpp>

#include <charconv>
#include <map>
#include <ostream>
#include <string>

namespace idemgate::proxy {

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

std::int64_t millis(const ledger::TimePoint& t) { return t.time_since_epoch().count(); }

json::object to_json(const ledger::Intent& i) {
  json::object o{{"id", i.id},
                 {"run", i.run},
                 {"tool", i.tool},
                 {"fingerprint", i.fingerprint},
                 {"key", i.key},
                 {"state", ledger::to_string(i.state)},
                 {"class", i.answer_class},
                 {"attempts", i.attempts},
                 {"receipt", i.receipt},
                 {"recovered", i.recovered},
                 {"created_at_ms", millis(i.created_at)},
                 {"updated_at_ms", millis(i.updated_at)}};
  if (i.status) o["status"] = *i.status;
  return o;
}

json::object to_json(const ledger::Escalation& e) {
  boost::system::error_code ec;
  auto package = json::parse(e.package_json, ec);
  json::object o{{"id", e.id},
                 {"run", e.run},
                 {"reason_code", e.reason_code},
                 {"state", ledger::to_string(e.state)},
                 {"receipt", e.receipt},
                 {"note", e.note},
                 {"created_at_ms", millis(e.created_at)},
                 {"package", ec ? json::value(e.package_json) : package}};
  if (e.intent_id) o["intent_id"] = *e.intent_id;
  return o;
}

json::object to_json(const ledger::Run& r) {
  return {{"run", r.id}, {"state", ledger::to_string(r.state)}, {"calls", r.calls}, {"budget", r.budget},
          {"reason", r.reason}};
}

template <class T>
int print(const ledger::Result<T>& r, std::ostream& out, std::ostream& err) {
  if (!r) {
    err << "idemgate: ledger: " << r.error().message() << "\n";
    return 1;
  }
  if constexpr (requires { r->begin(); }) {
    for (auto const& item : *r) out << json::serialize(to_json(item)) << "\n";
  } else {
    out << json::serialize(to_json(*r)) << "\n";
  }
  return 0;
}

std::optional<std::int64_t> parse_id(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
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
  auto& store = *stores->front();
  if (auto m = store.migrate(); !m) {
    err << "idemgate: ledger: " << m.error().message() << "\n";
    return 1;
  }

  if (group == "escalations" && verb == "list") {
    std::optional<ledger::EscalationState> state;
    if (auto s = a.options.find("state"); s != a.options.end()) {
      state = ledger::parse_escalation_state(s->second);
      if (!state) return usage("unknown --state '" + s->second + "'");
    }
    return print(store.list_escalations(state, 1000), out, err);
  }
  if (group == "escalations" && verb == "resolve") {
    if (a.positional.size() < 4) return usage("resolve needs ID and approve|deny|complete");
    auto id = parse_id(a.positional[2]);
    if (!id) return usage("escalation ID must be a number");
    ledger::ResolveRequest rr;
    rr.escalation_id = *id;
    auto const how = a.positional[3];
    if (how == "approve") rr.resolution = ledger::Resolution::approve;
    else if (how == "deny") rr.resolution = ledger::Resolution::deny;
    else if (how == "complete") rr.resolution = ledger::Resolution::complete;
    else return usage("resolution must be approve, deny or complete");
    if (auto r = a.options.find("receipt"); r != a.options.end()) rr.receipt = r->second;
    if (auto n = a.options.find("note"); n != a.options.end()) rr.note = n->second;
    if (rr.resolution == ledger::Resolution::complete && rr.receipt.empty())
      return usage("complete needs --receipt (the provider's id for the effect)");
    return print(store.resolve_escalation(rr), out, err);
  }
  if (group == "intents" && verb == "show") {
    if (auto k = a.options.find("key"); k != a.options.end()) return print(store.find_intent_by_key(k->second), out, err);
    if (auto i = a.options.find("id"); i != a.options.end()) {
      auto id = parse_id(i->second);
      if (!id) return usage("--id must be a number");
      return print(store.find_intent(*id), out, err);
    }
    if (auto r = a.options.find("run"); r != a.options.end()) return print(store.list_intents_by_run(r->second, 1000), out, err);
    return usage("intents show needs --key, --id or --run");
  }
  if (group == "runs" && a.positional.size() >= 3) {
    std::string const run(a.positional[2]);
    std::string reason = a.options.count("reason") ? a.options["reason"] : "by operator";
    if (verb == "show") return print(store.find_run(run), out, err);
    if (verb == "unfreeze") return print(store.set_run_state(run, ledger::RunState::active, reason), out, err);
    if (verb == "kill") return print(store.set_run_state(run, ledger::RunState::killed, reason), out, err);
  }
  return usage("unknown command");
}

}  // namespace idemgate::proxy
