// The operator page: server-rendered HTML with inline CSS and SVG charts, no
// external assets and no build step. Pure rendering from ledger rows to
// text; admin_api.cpp does the routing, the auth and the ledger calls.
#pragma once

#include "ledger/types.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::proxy::page {

std::string escape_html(std::string_view);
// Percent-encodes all but RFC 3986 unreserved characters (a path segment or a query value).
std::string escape_url(std::string_view);
// "2026-12-01 08:00:00Z"
std::string utc_time(const ledger::TimePoint&);

struct QueueFilter {
  std::string state = "open";  // "" for every state
  std::string reason;          // "" for every reason
};

// The escalation queue: filters, then one row per escalation linking to it.
std::string render_queue(const std::vector<ledger::Escalation>&, const QueueFilter&);
// One package in full with its resolve actions (open escalations only).
std::string render_escalation(const ledger::Escalation&, const std::string& csrf);
// A run: its state, kill / unfreeze, and its intents. run is nullopt when
// the ledger has never seen it.
std::string render_run(const std::string& run_id, const std::optional<ledger::Run>& run,
                       const std::vector<ledger::Intent>& intents, const std::string& csrf);
// The production signals as SVG charts.
std::string render_dashboard(const ledger::Signals&, std::string_view since_label);
std::string render_login(std::string_view message, const std::string& csrf);
// A full page around an error message.
std::string render_error(unsigned status, std::string_view title, std::string_view detail);

}  // namespace idemgate::proxy::page
