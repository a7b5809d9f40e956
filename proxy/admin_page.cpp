// Operator page rendering (see admin_page.hpp).
#include "proxy/admin_page.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>

namespace idemgate::proxy::page {

namespace json = boost::json;

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string escape_url(std::string_view text) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

std::string utc_time(const ledger::TimePoint& t) {
  auto const secs = static_cast<std::time_t>(t.time_since_epoch().count() / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

namespace {

constexpr std::string_view style = R"(
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header b{font-size:16px}
main{padding:16px 24px;max-width:1200px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e3e6eb;vertical-align:top}
th{background:#eef1f5;font-weight:600}
.state-open{color:#b3261e;font-weight:600}.state-approved,.state-completed{color:#1b7a36}.state-denied{color:#6b6f76}
pre{background:#fff;border:1px solid #e3e6eb;padding:10px;overflow:auto;max-height:480px}
form.inline{display:inline-block;margin:0 8px 8px 0}
button{padding:6px 12px;border:1px solid #8a94a6;border-radius:4px;background:#fff;cursor:pointer}
button.approve{border-color:#1b7a36;color:#1b7a36}button.deny,button.kill{border-color:#b3261e;color:#b3261e}
dl{display:grid;grid-template-columns:max-content auto;gap:4px 16px;background:#fff;padding:10px;border:1px solid #e3e6eb}
dt{font-weight:600}dd{margin:0}
.cards{display:flex;gap:16px;flex-wrap:wrap;margin-bottom:16px}
.card{background:#fff;border:1px solid #e3e6eb;padding:10px 16px;min-width:180px}
.card .n{font-size:28px;font-weight:700}.bad{color:#b3261e}
figure{background:#fff;border:1px solid #e3e6eb;margin:0 0 16px;padding:10px}
figcaption{font-weight:600;margin-bottom:6px}
.muted{color:#6b6f76}
)";

std::string layout(std::string_view title, std::string_view body) {
  std::string out = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width\"><title>";
  out += escape_html(title);
  out += " - idemgate</title><style>";
  out += style;
  out += "</style></head><body><header><b>idemgate</b><a href=\"/\">Escalations</a><a href=\"/runs\">Runs</a>"
         "<a href=\"/dashboard\">Dashboard</a></header><main>";
  out += body;
  out += "</main></body></html>\n";
  return out;
}

std::string state_cell(std::string_view state) {
  return "<span class=\"state-" + std::string(state) + "\">" + escape_html(state) + "</span>";
}

// The package as indented JSON for the page (Boost.JSON 1.81 has no pretty printer).
void pretty(const json::value& v, std::string& out, std::size_t indent) {
  if (v.is_object() && !v.get_object().empty()) {
    out += "{\n";
    bool first = true;
    for (auto const& kv : v.get_object()) {
      if (!first) out += ",\n";
      first = false;
      out.append(indent + 2, ' ');
      out += json::serialize(json::value(kv.key()));
      out += ": ";
      pretty(kv.value(), out, indent + 2);
    }
    out += "\n";
    out.append(indent, ' ');
    out += "}";
  } else if (v.is_array() && !v.get_array().empty()) {
    out += "[\n";
    bool first = true;
    for (auto const& item : v.get_array()) {
      if (!first) out += ",\n";
      first = false;
      out.append(indent + 2, ' ');
      pretty(item, out, indent + 2);
    }
    out += "\n";
    out.append(indent, ' ');
    out += "]";
  } else {
    out += json::serialize(v);
  }
}

std::string member(const json::value& package, std::string_view name) {
  if (!package.is_object()) return "";
  auto const* v = package.as_object().if_contains(name);
  if (!v || v->is_null()) return "";
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}

std::string confirm_form(std::string_view action, std::string_view fields, std::string_view button_class,
                         std::string_view label, std::string_view question, const std::string& csrf) {
  std::string out = "<form class=\"inline\" method=\"post\" action=\"" + std::string(action) +
                    "\" onsubmit=\"return confirm('" + escape_html(question) + "')\">";
  out += "<input type=\"hidden\" name=\"csrf\" value=\"" + csrf + "\">";
  out += fields;
  out += "<button type=\"submit\" class=\"" + std::string(button_class) + "\">" + std::string(label) + "</button></form>";
  return out;
}

// ---- charts ---------------------------------------------------------------

constexpr std::array<std::string_view, 8> palette{"#3b6fd4", "#d4603b", "#2e9e5b", "#9b59b6",
                                                 "#c9a227", "#1aa3a3", "#d43b7a", "#6b6f76"};

struct Bar {
  std::string label;
  std::vector<std::pair<std::string, double>> parts;  // series, value
};

// Stacked vertical bars, one per category, with a legend of the series.
std::string bar_chart(std::string_view id, std::string_view caption, const std::vector<Bar>& bars,
                      std::string_view empty_text) {
  std::string out = "<figure id=\"" + std::string(id) + "\"><figcaption>" + escape_html(caption) + "</figcaption>";
  if (bars.empty()) {
    out += "<p class=\"muted chart-empty\">" + escape_html(empty_text) + "</p></figure>";
    return out;
  }
  std::vector<std::string> series;
  double max = 0;
  for (auto const& b : bars) {
    double sum = 0;
    for (auto const& [s, v] : b.parts) {
      sum += v;
      if (std::find(series.begin(), series.end(), s) == series.end()) series.push_back(s);
    }
    max = std::max(max, sum);
  }
  if (max <= 0) max = 1;
  // Category labels slant down to the right: the right margin keeps the last one in view.
  int const width = 900, height = 270, left = 44, right = 150, bottom = 70, top = 28;
  int const plot_h = height - bottom - top;
  double const slot = static_cast<double>(width - left - right) / static_cast<double>(bars.size());
  double const bar_w = std::max(4.0, std::min(48.0, slot * 0.7));
  char buf[256];
  out += "<svg class=\"chart\" role=\"img\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
         "\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">";
  // Axis and a few grid lines.
  for (int g = 0; g <= 4; ++g) {
    double const y = top + plot_h - plot_h * g / 4.0;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e3e6eb\"/>"
                  "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#6b6f76\">%.0f</text>",
                  left, y, width - right, y, left - 6, y + 4, max * g / 4.0);
    out += buf;
  }
  for (std::size_t i = 0; i < bars.size(); ++i) {
    double const x = left + slot * static_cast<double>(i) + (slot - bar_w) / 2;
    double y = top + plot_h;
    for (auto const& [s, v] : bars[i].parts) {
      if (v <= 0) continue;
      double const h = plot_h * v / max;
      y -= h;
      auto const color = palette[static_cast<std::size_t>(std::find(series.begin(), series.end(), s) - series.begin()) %
                                 palette.size()];
      std::snprintf(buf, sizeof buf, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"",
                    x, y, bar_w, h);
      out += buf;
      out += color;
      out += "\"><title>" + escape_html(bars[i].label) + " / " + escape_html(s) + ": " +
             std::to_string(static_cast<long long>(v)) + "</title></rect>";
    }
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"start\" transform=\"rotate(30 %.1f %d)\" fill=\"#1d2330\">",
                  x + bar_w / 2, height - bottom + 14, x + bar_w / 2, height - bottom + 14);
    out += buf;
    out += escape_html(bars[i].label.size() > 22 ? bars[i].label.substr(0, 21) + "…" : bars[i].label);
    out += "</text>";
  }
  // Legend along the top.
  double lx = left;
  for (std::size_t s = 0; s < series.size(); ++s) {
    std::snprintf(buf, sizeof buf, "<rect x=\"%.1f\" y=\"6\" width=\"10\" height=\"10\" fill=\"", lx);
    out += buf;
    out += palette[s % palette.size()];
    std::snprintf(buf, sizeof buf, "\"/><text x=\"%.1f\" y=\"15\">", lx + 14);
    out += buf;
    out += escape_html(series[s]) + "</text>";
    lx += 24 + 7.0 * static_cast<double>(series[s].size());
  }
  out += "</svg></figure>";
  return out;
}

std::string hour_label(const std::string& hour) {
  // "YYYY-MM-DDTHH:00:00Z" -> "MM-DD HH:00"
  if (hour.size() >= 16) return hour.substr(5, 5) + " " + hour.substr(11, 5);
  return hour;
}

}  // namespace

std::string render_queue(const std::vector<ledger::Escalation>& list, const QueueFilter& filter) {
  std::string body = "<h1>Escalations</h1><form method=\"get\" action=\"/\" id=\"filter\">State <select name=\"state\">";
  for (std::string_view s : {"open", "approved", "denied", "completed", ""}) {
    body += "<option value=\"" + std::string(s) + "\"" + (filter.state == s ? " selected" : "") + ">" +
            std::string(s.empty() ? "any" : s) + "</option>";
  }
  body += "</select> Reason <input name=\"reason\" value=\"" + escape_html(filter.reason) +
          "\" placeholder=\"any reason_code\"> <button type=\"submit\">Filter</button></form><p></p>";
  std::set<std::string> reasons;
  for (auto const& e : list) reasons.insert(e.reason_code);
  if (!reasons.empty()) {
    body += "<p class=\"muted\">Reasons here: ";
    for (auto const& r : reasons)
      body += "<a href=\"/?state=" + escape_url(filter.state) + "&amp;reason=" + escape_url(r) + "\">" +
              escape_html(r) + "</a> ";
    body += "</p>";
  }
  body += "<table id=\"queue\"><thead><tr><th>#</th><th>Reason</th><th>State</th><th>Run</th><th>Tool</th>"
          "<th>Question for the human</th><th>Created</th></tr></thead><tbody>";
  int shown = 0;
  for (auto const& e : list) {
    if (!filter.reason.empty() && e.reason_code != filter.reason) continue;
    ++shown;
    boost::system::error_code ec;
    auto const package = json::parse(e.package_json, ec);
    auto const href = "/escalations/" + std::to_string(e.id);
    body += "<tr class=\"escalation\" data-id=\"" + std::to_string(e.id) + "\"><td><a href=\"" + href + "\">" +
            std::to_string(e.id) + "</a></td><td><a href=\"" + href + "\">" + escape_html(e.reason_code) +
            "</a></td><td>" + state_cell(ledger::to_string(e.state)) + "</td><td><a href=\"/runs/" +
            escape_url(e.run) + "\">" + escape_html(e.run) + "</a></td><td>" + escape_html(member(package, "tool")) +
            "</td><td>" + escape_html(member(package, "question_for_human")) + "</td><td>" +
            utc_time(e.created_at) + "</td></tr>";
  }
  if (shown == 0) body += "<tr><td colspan=\"7\" class=\"muted\">No escalations match.</td></tr>";
  body += "</tbody></table>";
  return layout("Escalations", body);
}

std::string render_escalation(const ledger::Escalation& e, const std::string& csrf) {
  boost::system::error_code ec;
  auto const package = json::parse(e.package_json, ec);
  std::string body = "<h1>Escalation " + std::to_string(e.id) + ": " + escape_html(e.reason_code) + "</h1>";
  body += "<dl id=\"package\">";
  auto row = [&](std::string_view name, const std::string& value, std::string_view cls = {}) {
    body += "<dt>" + std::string(name) + "</dt><dd" +
            (cls.empty() ? std::string() : " class=\"" + std::string(cls) + "\"") + ">" +
            (value.empty() ? "<span class=\"muted\">none</span>" : escape_html(value)) + "</dd>";
  };
  row("Question for the human", member(package, "question_for_human"), "question");
  row("State", std::string(ledger::to_string(e.state)), "state");
  body += "<dt>Run</dt><dd><a href=\"/runs/" + escape_url(e.run) + "\">" + escape_html(e.run) + "</a></dd>";
  row("Tool", member(package, "tool"));
  row("Detail", member(package, "detail"));
  row("Idempotency key", member(package, "idempotency_key"), "key");
  auto const attempts = member(package, "attempts");
  auto const bound = member(package, "bound");
  row("Attempts", attempts.empty() ? "" : attempts + (bound.empty() ? "" : " (retry bound " + bound + ")"));
  row("Receipt", e.receipt.empty() ? member(package, "receipt") : e.receipt, "receipt");
  row("Trace id", member(package, "trace_id"), "trace");
  row("Fingerprint", member(package, "fingerprint"));
  row("Intent", e.intent_id ? std::to_string(*e.intent_id) : "");
  row("Created", utc_time(e.created_at));
  if (e.resolved_at) row("Resolved", utc_time(*e.resolved_at));
  if (!e.note.empty()) row("Note", e.note);
  body += "</dl>";
  body += "<h2>Tools tried</h2><table id=\"tools-tried\"><thead><tr><th>Tool</th><th>Class</th><th>Fingerprint</th>"
          "</tr></thead><tbody>";
  if (package.is_object()) {
    if (auto const* tried = package.as_object().if_contains("tools_tried"); tried && tried->is_array()) {
      for (auto const& t : tried->as_array())
        body += "<tr><td>" + escape_html(member(t, "name")) + "</td><td>" + escape_html(member(t, "class")) +
                "</td><td class=\"muted\">" + escape_html(member(t, "fingerprint")) + "</td></tr>";
    }
  }
  body += "</tbody></table>";
  if (e.state == ledger::EscalationState::open) {
    auto const action = "/actions/escalations/" + std::to_string(e.id) + "/resolve";
    body += "<h2>Resolve</h2><div id=\"actions\">";
    body += confirm_form(action, "<input type=\"hidden\" name=\"action\" value=\"approve\">", "approve", "Approve",
                         "Approve: the call may go through once. Continue?", csrf);
    body += confirm_form(action, "<input type=\"hidden\" name=\"action\" value=\"deny\">", "deny", "Deny",
                         "Deny: the call is refused for good. Continue?", csrf);
    body += confirm_form(action,
                         "<input type=\"hidden\" name=\"action\" value=\"complete\"><input name=\"receipt\" "
                         "required placeholder=\"provider receipt (e.g. ch_123)\"> ",
                         "complete", "Complete with receipt",
                         "Complete: the intent is settled with this receipt and replays it. Continue?", csrf);
    body += "</div>";
  }
  std::string shown;
  if (ec) shown = e.package_json;
  else pretty(package, shown, 0);
  body += "<h2>Package</h2><pre id=\"package-json\">" + escape_html(shown) + "</pre>";
  return layout("Escalation " + std::to_string(e.id), body);
}

std::string render_run(const std::string& run_id, const std::optional<ledger::Run>& run,
                       const std::vector<ledger::Intent>& intents, const std::string& csrf) {
  std::string body = "<h1>Runs</h1><form method=\"get\" action=\"/runs\">Run <input name=\"run\" value=\"" +
                     escape_html(run_id) + "\"> <button type=\"submit\">Show</button></form>";
  if (run_id.empty()) return layout("Runs", body);
  body += "<h2>Run " + escape_html(run_id) + "</h2>";
  if (!run) {
    body += "<p class=\"muted\">The ledger has not seen this run.</p>";
    return layout("Run " + run_id, body);
  }
  body += "<dl id=\"run\"><dt>State</dt><dd class=\"run-state\">" + escape_html(ledger::to_string(run->state)) +
          "</dd><dt>Calls</dt><dd>" + std::to_string(run->calls) + " of " + std::to_string(run->budget) +
          "</dd><dt>Reason</dt><dd>" + escape_html(run->reason) + "</dd></dl><p></p>";
  auto const base = "/actions/runs/" + escape_url(run_id);
  if (run->state == ledger::RunState::frozen)
    body += confirm_form(base + "/unfreeze", "", "approve", "Unfreeze", "Unfreeze: its write tools may be called again. Continue?", csrf);
  if (run->state != ledger::RunState::killed)
    body += confirm_form(base + "/kill", "<input name=\"reason\" placeholder=\"reason\"> ", "kill", "Kill",
                         "Kill: every further call of this run is refused, for good. Continue?", csrf);
  body += "<h2>Intents</h2><table id=\"intents\"><thead><tr><th>#</th><th>Tool</th><th>State</th><th>Class</th>"
          "<th>Attempts</th><th>Key</th><th>Receipt</th><th>Updated</th></tr></thead><tbody>";
  for (auto const& i : intents)
    body += "<tr><td>" + std::to_string(i.id) + "</td><td>" + escape_html(i.tool) + "</td><td>" +
            escape_html(ledger::to_string(i.state)) + "</td><td>" + escape_html(i.answer_class) + "</td><td>" +
            std::to_string(i.attempts) + "</td><td class=\"muted\">" + escape_html(i.key) + "</td><td>" +
            escape_html(i.receipt) + "</td><td>" + utc_time(i.updated_at) + "</td></tr>";
  if (intents.empty()) body += "<tr><td colspan=\"8\" class=\"muted\">No intents.</td></tr>";
  body += "</tbody></table>";
  return layout("Run " + run_id, body);
}

std::string render_dashboard(const ledger::Signals& s, std::string_view since_label) {
  std::string body = "<h1>Dashboard</h1><p class=\"muted\">From the ledger's dash_* views; hourly series since " +
                     escape_html(since_label) + ".</p><div class=\"cards\">";
  std::int64_t open = 0;
  for (auto const& r : s.open_escalations) open += r.count;
  auto card = [&](std::string_view id, std::string_view label, std::int64_t n, bool bad) {
    body += "<div class=\"card\" id=\"" + std::string(id) + "\"><div class=\"n" + (bad && n > 0 ? " bad" : "") +
            "\">" + std::to_string(n) + "</div>" + std::string(label) + "</div>";
  };
  card("open-escalations", "open escalations", open, true);
  card("unknown-past-ttl", "money / outcome unknown past TTL", s.unknown_past_ttl, true);
  card("duplicate-receipts", "local keys with more than one provider receipt (must be 0)", s.duplicate_receipts, true);
  body += "</div>";

  std::map<std::string, Bar> by_hour;
  for (auto const& h : s.escalations_by_hour) {
    auto& bar = by_hour[h.hour];
    bar.label = hour_label(h.hour);
    bar.parts.emplace_back(h.reason_code, static_cast<double>(h.escalations));
  }
  std::vector<Bar> bars;
  for (auto& [k, b] : by_hour) bars.push_back(std::move(b));
  body += bar_chart("chart-escalations", "Escalations by reason per hour (the escalate mix over time)", bars,
                    "No escalations in this period.");

  bars.clear();
  for (auto const& r : s.open_escalations) bars.push_back({r.reason_code, {{"open", static_cast<double>(r.count)}}});
  body += bar_chart("chart-open", "Open escalations by reason", bars, "No open escalations.");

  std::map<std::string, Bar> refusals;
  for (auto const& r : s.refusals_by_hour) {
    auto& bar = refusals[r.hour];
    bar.label = hour_label(r.hour);
    bar.parts.emplace_back(r.tool + " / " + r.reason_code, static_cast<double>(r.refusals));
  }
  bars.clear();
  for (auto& [k, b] : refusals) bars.push_back(std::move(b));
  body += bar_chart("chart-refusals", "Same-fingerprint refusals per hour", bars, "No refusals in this period.");

  bars.clear();
  for (auto const& d : s.retry_depth)
    bars.push_back({d.tool + " (" + std::to_string(d.depth) + ")", {{"intents", static_cast<double>(d.intents)}}});
  body += bar_chart("chart-retry-depth", "Retry depth: intents by tool and attempts", bars, "No attempts yet.");
  return layout("Dashboard", body);
}

std::string render_login(std::string_view message, const std::string&) {
  std::string body = "<h1>Sign in</h1>";
  if (!message.empty()) body += "<p class=\"bad\">" + escape_html(message) + "</p>";
  body += "<form method=\"post\" action=\"/login\"><p>Admin token (the first line of admin.token_file)</p>"
          "<input type=\"password\" name=\"token\" autocomplete=\"current-password\" autofocus> "
          "<button type=\"submit\">Sign in</button></form>";
  return layout("Sign in", body);
}

std::string render_error(unsigned status, std::string_view title, std::string_view detail) {
  return layout(title, "<h1>" + std::to_string(status) + " " + escape_html(title) + "</h1><p>" +
                           escape_html(detail) + "</p>");
}

}  // namespace idemgate::proxy::page
