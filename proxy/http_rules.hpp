// The HTTP/1.1 rules a forward proxy enforces before and while it forwards:
// raw header checks (obs-fold, bare LF, request-line length), request
// framing, hop-by-hop headers, Via, rendering a head; the request target's
// forms are read in target.hpp. Sans-I/O: unit-tested on bytes.
#pragma once

#include "proxy/target.hpp"

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/container/small_vector.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace idemgate::proxy {

class AnswerHead;

enum class RawHeaderError {
  none,
  incomplete,              // no CRLFCRLF yet
  request_line_too_long,
  obs_fold,                // a header line starting with SP or HTAB
  bare_lf,                 // LF not preceded by CR
  nul_byte,
};

struct RawHeaderCheck {
  RawHeaderError error = RawHeaderError::incomplete;
  std::size_t header_size = 0;  // bytes up to and including CRLFCRLF
};

// Looks at the bytes received so far. Leading empty lines before the request
// line are tolerated (RFC 9112 section 2.2).
RawHeaderCheck check_raw_header(std::string_view bytes, std::size_t request_line_limit) noexcept;

// Transfer-Encoding on a request must be exactly "chunked" (RFC 9112 6.1:
// anything else cannot be framed reliably). Returns false when it is not.
bool acceptable_request_transfer_encoding(const boost::beast::http::fields&);

// Removes Connection and every header it names, Keep-Alive,
// Proxy-Authorization, Proxy-Connection, TE, Trailer, Upgrade and
// Transfer-Encoding (framing is re-done by the serializer), plus Idemgate-*
// request headers when strip_idemgate is set.
void strip_hop_by_hop(boost::beast::http::fields&, bool strip_idemgate);
void strip_hop_by_hop(AnswerHead&, bool strip_idemgate = false);

// The fields of `f` that strip_hop_by_hop would keep, in order, without
// changing `f` (pointers into it: valid while `f` is not changed).
using EndToEndFields = boost::container::small_vector<const boost::beast::http::fields::value_type*, 16>;
EndToEndFields end_to_end_fields(const boost::beast::http::fields& f, bool strip_idemgate);

// The Via value a hop sends on: every earlier hop among `fields`, in order,
// then this one (via_hop), in one field.
std::string joined_via(const EndToEndFields& fields, unsigned version);

// The idle timeout an upstream announces in Keep-Alive ("timeout=5, max=100"),
// or nullopt when the header does not say (RFC 9112 appendix C.2.2 keeps
// the header in use though it is not standard).
std::optional<std::chrono::seconds> keep_alive_timeout(std::string_view keep_alive_value);

// This hop as Via names it ("1.1 idemgate" for version 11), in `hop`.
std::string_view via_hop(unsigned version, char (&hop)[13]) noexcept;

// Appends this hop to Via ("1.1 idemgate"): one Via field after the others,
// every earlier hop in it.
void add_via(boost::beast::http::fields&, unsigned version);
void add_via(AnswerHead&, unsigned version);

// The upstream answer's head as the client sees it, exactly as the same
// steps on Beast's fields would leave it: hop-by-hop fields out (and
// Idemgate-* ones when strip_idemgate is set), this hop (the head's
// version) in Via, the client's version, then Transfer-Encoding: chunked
// when the body is re-chunked, and Connection when persistence differs from
// the version's default.
void prepare_answer_head(AnswerHead&, unsigned client_version, bool chunked, bool keep_alive,
                         bool strip_idemgate = false);

// The header exactly as Beast's serializer writes it (start line, each field
// as "Name: value", CRLF), into out (cleared first): one contiguous buffer the
// proxy sends with the body in one gathered write.
void render_head(const boost::beast::http::request_header<>&, std::string& out);
void render_head(const boost::beast::http::response_header<>&, std::string& out);
void render_head(const AnswerHead&, std::string& out);

}  // namespace idemgate::proxy
