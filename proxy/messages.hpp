// The messages a guarded call sends and answers with, built from the
// client's request and from an upstream or stored answer.
#pragma once

#include "ledger/types.hpp"
#include "proxy/exchange.hpp"

#include <boost/beast/http/buffer_body.hpp>

namespace idemgate::proxy {

// The upstream request: the client's header minus hop-by-hop and Idemgate-*
// headers, in origin-form, with the body in memory. A guarded request asks
// for the identity encoding, so that receipts, redaction and replay always
// see the plain answer.
StringRequest upstream_request(const boost::beast::http::request<boost::beast::http::buffer_body>& in,
                               const Target& target, std::string body, bool guarded);

// The answer the client sees for an upstream answer or a stored one (see
// finish_response in messages.cpp for its framing and fields).
StringResponse client_response(int status, const ledger::Headers& headers, std::string body, unsigned version,
                               bool keep_alive);
// The same from an upstream answer, taken over whole (its header and body
// are moved, not copied); `head`: the answer to a HEAD request.
StringResponse client_response(StringResponse&& upstream, unsigned version, bool keep_alive, bool head);

ledger::Headers headers_of(const boost::beast::http::fields& fields);

}  // namespace idemgate::proxy
