// The messages a guarded call sends and answers with, built from the
// client's request and from an upstream or stored answer.
#pragma once

#include "ledger/types.hpp"
#include "proxy/exchange.hpp"

#include <boost/beast/http/buffer_body.hpp>

namespace idemgate::proxy {

// The upstream request for the client's `in` with `body` (which must
// outlive it), its header rendered straight from the client's fields (no
// second set of Beast fields): in origin-form, HTTP/1.1, without the
// hop-by-hop and Idemgate-* fields, Expect, Content-Length and Host; then
// Host the target's, this hop in Via after every earlier one,
// `key_field: key` when key_field is set (replacing the client's), and the
// body's length (none for an empty body, but for OPTIONS, PUT and POST). A guarded request asks for the
// identity encoding, so that receipts, redaction and replay always see the
// plain answer.
UpstreamRequest upstream_request(const boost::beast::http::request<boost::beast::http::buffer_body>& in,
                                 const Target& target, std::string_view body, bool guarded,
                                 std::string_view key_field = {}, std::string_view key = {});

// Who an answer goes to: the client's version and keep-alive, whether it
// asked with HEAD, and whether the call was guarded (matched a tool).
struct AnswerTo {
  unsigned version = 11;
  bool keep_alive = true;
  bool head = false;
  bool guarded = true;
};

// The answer the client sees for a stored answer or an upstream one (see
// finish_response in messages.cpp for its framing and fields).
StringResponse client_response(int status, const ledger::Headers& headers, std::string body, const AnswerTo& to);
// The same from an upstream answer, taken over whole (its header and body
// are moved, not copied).
StringResponse client_response(StringResponse&& upstream, const AnswerTo& to);

ledger::Headers headers_of(const boost::beast::http::fields& fields);

}  // namespace idemgate::proxy
