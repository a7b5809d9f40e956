// Writing answers the proxy makes itself (problem+json, JSON-RPC for MCP
// clients) to a client stream.
#pragma once

#include "proxy/problem.hpp"

#include "proxy/stream.hpp"
#include "ledger/executor.hpp"
#include <boost/beast/http/fields.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace idemgate::proxy {

// Writes p as application/problem+json (with Retry-After when set and any
// extra headers), bounded by timeout. Returns false if the write failed.
Task<bool> send_problem(ProxyStream& client, const Problem& p, unsigned version,
                                          bool keep_alive, std::chrono::milliseconds timeout,
                                          const boost::beast::http::fields* extra_headers = nullptr);

// Writes a body the proxy made itself with this content type (a JSON-RPC
// answer to an MCP client), no-store, bounded by timeout.
Task<bool> send_own_answer(ProxyStream& client, unsigned status, std::string_view content_type,
                                             std::string body, std::optional<unsigned> retry_after_s,
                                             unsigned version, bool keep_alive, std::chrono::milliseconds timeout,
                                             const boost::beast::http::fields* extra_headers = nullptr);

}  // namespace idemgate::proxy
