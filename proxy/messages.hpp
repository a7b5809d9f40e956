// The messages a guarded call sends and answers with, built from the
// client's request and from an upstream or stored answer.
#pragma once

#include "ledger/types.hpp"
#include "proxy/answer_head.hpp"
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

// An answer's head, its fields as views (valid while the answer is not
// changed or destroyed): an upstream answer's, or a stored one's (each field
// named as Beast names it, in the stored order: a name repeated apart stays
// apart, where Beast's fields would group it; stored answers come from
// Beast's fields, grouped already). Its version is 1.1 for both (a stored
// answer keeps none): this hop's Via says 1.1 whichever it is.
void head_of(const StringResponse& upstream, AnswerHead& head);
void head_of(int status, const ledger::Headers& headers, AnswerHead& head);

// Turns `head` into the one the client sees, with a body of body_size
// bytes: no hop-by-hop field (on a guarded call no Idemgate-* field either,
// but the ones this hop adds afterwards: an upstream cannot speak for
// idemgate), this hop in Via, the client's version and keep-alive, the
// status's own text, and framing of its own. A 1xx or 204 carries no length
// and no body; a 304 and the answer to a HEAD carry no body, and keep the
// upstream's Content-Length, which describes the representation a GET would
// get; any other answer's length is its body's. Returns whether the body is
// sent. Rendered straight from the fields (render_head): no Beast fields are
// built for an answer that is not streamed.
bool to_client(AnswerHead& head, std::size_t body_size, const AnswerTo& to);

ledger::Headers headers_of(const boost::beast::http::fields& fields);

// The header list stored with an answer for its replays: the fields a hop
// passes on (end_to_end_fields), in Beast's order. Connection and what it
// names, Keep-Alive, Transfer-Encoding and the other hop-by-hop fields
// described the upstream's connection, which a replay never uses (to_client
// drops them again), and cost every stored answer their bytes: two of the
// seven fields of nginx's answer, 56 of the 254 bytes its list takes.
// Content-Type stays even when a Connection names it (an upstream breaking
// RFC 9110 7.6.1): the ledger's readers of a stored answer go by it (the
// body's redaction, the MCP replay's check of the body).
ledger::Headers stored_answer_headers(const boost::beast::http::fields& fields);

}  // namespace idemgate::proxy
