// Writing answers the proxy makes itself (problem+json) to a client stream.
#pragma once

#include "proxy/problem.hpp"

#include <boost/asio/awaitable.hpp>
#include "proxy/stream.hpp"
#include <boost/beast/http/fields.hpp>

#include <chrono>

namespace idemgate::proxy {

// Writes p as application/problem+json (with Retry-After when set and any
// extra headers), bounded by timeout. Returns false if the write failed.
boost::asio::awaitable<bool> send_problem(ProxyStream& client, const Problem& p, unsigned version,
                                          bool keep_alive, std::chrono::milliseconds timeout,
                                          const boost::beast::http::fields* extra_headers = nullptr);

}  // namespace idemgate::proxy
