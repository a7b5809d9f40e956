// Redaction of headers, query parameters and bodies (see redact.hpp).
#include "ledger/redact.hpp"

#include "ledger/store_support.hpp"
#include "policy/headers.hpp"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <iterator>
#include <optional>

namespace idemgate::ledger {

namespace {

// Folded spellings (see Folded): X-Api-Key is xapikey.
constexpr std::string_view default_secret_headers[]{
    "authorization", "proxyauthorization", "cookie", "setcookie", "xapikey", "apikey", "xauthtoken",
    "xaccesstoken", "xapitoken", "xgoogapikey", "xamzsecuritytoken", "ocpapimsubscriptionkey", "privatetoken",
    "xvaulttoken", "xcsrftoken", "xxsrftoken", "xshopifyaccesstoken", "xauth", "auth", "xsecret",
};
constexpr std::string_view default_secret_query[]{
    "apikey", "key", "token", "accesstoken", "refreshtoken", "idtoken", "authtoken", "auth", "authorization",
    "secret", "clientsecret", "password", "passwd", "pwd", "pass", "signature", "sig", "xamzsignature",
    "xamzcredential", "xamzsecuritytoken", "sessiontoken", "privatekey", "accesskey", "secretkey",
};
// A name holding one of these anywhere is a credential (x-stripe-secret-key, sessiontoken, ...).
constexpr std::string_view credential_words[]{"apikey",    "token",      "secret", "password",     "passwd",
                                               "signature", "credential", "cookie", "authorization"};

// ASCII only, inline: names and keywords here are ASCII, and the C
// locale's tolower is a call per character.
constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

// A credential's name in one spelling: lowercase, '-', '_' and '.' dropped,
// so that API-Key, api_key and apikey are one name. Written into a buffer
// on the caller's stack (every header of every guarded request and answer
// is looked at); a name longer than it spills into a string.
class Folded {
 public:
  explicit Folded(std::string_view name) {
    char* out = small_;
    if (name.size() > sizeof small_) {
      spill_.resize(name.size());
      out = spill_.data();
    }
    std::size_t n = 0;
    for (char c : name)
      if (c != '-' && c != '_' && c != '.') out[n++] = ascii_lower(c);
    view_ = std::string_view(out, n);
  }
  Folded(const Folded&) = delete;
  Folded& operator=(const Folded&) = delete;
  std::string_view view() const noexcept { return view_; }

 private:
  char small_[64];
  std::string spill_;
  std::string_view view_;
};

// The credential words' first letters: most positions of a name start none.
constexpr auto credential_starts = [] {
  std::array<bool, 256> starts{};
  for (auto word : credential_words) starts[static_cast<unsigned char>(word.front())] = true;
  return starts;
}();

bool holds_credential_word(std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!credential_starts[static_cast<unsigned char>(name[i])]) continue;
    auto const rest = name.substr(i);
    for (auto word : credential_words)
      if (word.front() == name[i] && rest.starts_with(word)) return true;
  }
  return false;
}

// A default credential header, by the default names and words alone.
bool is_default_secret_header(std::string_view name) {
  Folded const f(name);
  return std::find(std::begin(default_secret_headers), std::end(default_secret_headers), f.view()) !=
             std::end(default_secret_headers) ||
         holds_credential_word(f.view());
}

// is_default_secret_header remembered per thread for the names seen last:
// every header of every guarded request and answer is looked at, and a
// proxy sees the same few names over and over. The verdict depends on the
// name's bytes alone (no configuration), so a remembered one never goes
// stale; a slot holds one name, the last to land on it.
bool is_default_secret_header_remembered(std::string_view name) {
  struct Slot {
    std::string name;
    bool secret = false;
    bool used = false;
  };
  constexpr std::size_t kSlots = 64;
  constexpr std::size_t kLongest = 64;  // longer names are not kept
  thread_local std::array<Slot, kSlots> slots;
  if (name.size() > kLongest) return is_default_secret_header(name);
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  auto& slot = slots[hash % kSlots];
  if (slot.used && slot.name == name) return slot.secret;
  slot.secret = is_default_secret_header(name);
  slot.name.assign(name);
  slot.used = true;
  return slot.secret;
}

bool is_secret_header(std::string_view name, const config::Redact& rules) {
  auto same = [&](std::string_view s) { return iequals(name, s); };
  if (std::any_of(rules.headers.begin(), rules.headers.end(), same)) return true;
  return is_default_secret_header_remembered(name);
}

bool is_secret_query_name(std::string_view decoded, const config::Redact& rules) {
  Folded const f(decoded);
  auto same = [&](const std::string& s) { return Folded(s).view() == f.view(); };
  return std::find(std::begin(default_secret_query), std::end(default_secret_query), f.view()) !=
             std::end(default_secret_query) ||
         holds_credential_word(f.view()) || std::any_of(rules.query.begin(), rules.query.end(), same);
}

std::string_view header_value(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return v;
  return {};
}

// Declared JSON (application/json, any +json type), or written like it (an
// object or an array, after white space or a byte order mark): what a
// provider may read as JSON though Boost.JSON refuses it (invalid UTF-8, a
// lone surrogate, deeper than 32, trailing bytes).
bool may_be_json(std::string_view body, std::string_view content_type) {
  if (policy::is_json_media_type(content_type)) return true;
  if (body.starts_with("\xef\xbb\xbf")) body.remove_prefix(3);
  auto const first = body.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (body[first] == '{' || body[first] == '[');
}

// "/card/number" -> "card[number]" (the pointer's ~1 and ~0 escapes undone).
std::string form_key(std::string_view pointer) {
  std::string key;
  bool first = true;
  std::size_t pos = 1;
  while (pos <= pointer.size() && !pointer.empty()) {
    auto next = pointer.find('/', pos);
    auto token = std::string(pointer.substr(pos, next == std::string_view::npos
                                                     ? std::string_view::npos
                                                     : next - pos));
    for (std::size_t i; (i = token.find("~1")) != std::string::npos;) token.replace(i, 2, "/");
    for (std::size_t i; (i = token.find("~0")) != std::string::npos;) token.replace(i, 2, "~");
    key += first ? token : "[" + token + "]";
    first = false;
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return key;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) &&
               std::isxdigit((unsigned char)s[i + 2])) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The target's query with every credential parameter's value replaced.
std::string redact_target_query(std::string_view target, const config::Redact& rules) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return std::string(target);
  std::string out(target.substr(0, q + 1));
  const auto query = target.substr(q + 1);
  std::size_t pos = 0;
  while (pos <= query.size()) {
    auto amp = query.find('&', pos);
    auto pair = query.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos);
    auto eq = pair.find('=');
    if (pos > 0) out += '&';
    if (is_secret_query_name(percent_decode(pair.substr(0, eq)), rules))
      out += std::string(pair.substr(0, eq)) + "=%5Bredacted%5D";
    else
      out += pair;
    if (amp == std::string_view::npos) break;
    pos = amp + 1;
  }
  return out;
}

std::string redact_form(std::string_view body, const config::Redact& rules) {
  std::vector<std::string> keys;
  for (const auto& p : rules.body) keys.push_back(form_key(p));
  std::string out;
  std::size_t pos = 0;
  while (pos <= body.size()) {
    auto amp = body.find('&', pos);
    auto pair = body.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos);
    auto eq = pair.find('=');
    auto name = percent_decode(pair.substr(0, eq));
    if (!out.empty() || pos > 0) out += '&';
    if (eq != std::string_view::npos && std::find(keys.begin(), keys.end(), name) != keys.end())
      out += std::string(pair.substr(0, eq)) + "=%5Bredacted%5D";
    else
      out += pair;
    if (amp == std::string_view::npos) break;
    pos = amp + 1;
  }
  return out;
}

// A basic_parser handler that keeps nothing but the number of members its
// objects hold as written: the parse says whether the text is JSON, by
// boost::json::parse's rules (parse_options{}: no comments, no trailing
// commas, valid UTF-8, depth 32), and how many keys it wrote.
struct Validate {
  static constexpr std::size_t max_object_size = boost::json::object::max_size();
  static constexpr std::size_t max_array_size = boost::json::array::max_size();
  static constexpr std::size_t max_key_size = boost::json::string::max_size();
  static constexpr std::size_t max_string_size = boost::json::string::max_size();
  using error_code = boost::system::error_code;
  using string_view = boost::json::string_view;

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) { return true; }
  bool on_object_end(std::size_t n, error_code&) {
    members += n;
    return true;
  }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t, error_code&) { return true; }
  bool on_key_part(string_view, std::size_t, error_code&) { return true; }
  bool on_key(string_view, std::size_t, error_code&) { return true; }
  bool on_string_part(string_view, std::size_t, error_code&) { return true; }
  bool on_string(string_view, std::size_t, error_code&) { return true; }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t, string_view, error_code&) { return true; }
  bool on_uint64(std::uint64_t, string_view, error_code&) { return true; }
  bool on_double(double, string_view, error_code&) { return true; }
  bool on_bool(bool, error_code&) { return true; }
  bool on_null(error_code&) { return true; }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

  std::size_t members = 0;
};

// The depth boost::json::parse allows a document; a snapshot's body nests
// one level below the snapshot itself.
constexpr std::size_t kDocumentDepth = boost::json::parse_options{}.max_depth;
constexpr std::size_t kBodyDepth = kDocumentDepth - 1;

// The members of the objects in `text` as written, when it is JSON nesting
// at most `depth` deep.
std::optional<std::size_t> json_members(std::string_view text, std::size_t depth) {
  boost::json::parse_options options;
  options.max_depth = depth;
  boost::json::basic_parser<Validate> parser(options);
  boost::system::error_code ec;
  auto const used = parser.write_some(false, text.data(), text.size(), ec);
  if (ec || used != text.size()) return std::nullopt;
  return parser.handler().members;
}

bool is_json_text(std::string_view text) { return json_members(text, kBodyDepth).has_value(); }

// The members of the objects in a document (a key written twice in one
// object is one member: the last one written).
std::size_t members_of(const boost::json::value& v) {
  std::size_t n = 0;
  if (auto const* o = v.if_object()) {
    n += o->size();
    for (auto const& member : *o) n += members_of(member.value());
  } else if (auto const* a = v.if_array()) {
    for (auto const& element : *a) n += members_of(element);
  }
  return n;
}

}  // namespace

Headers redact_headers(const Headers& headers, const config::Redact& rules) {
  Headers kept;
  kept.reserve(headers.size());
  for (const auto& h : headers)
    if (!is_secret_header(h.first, rules)) kept.push_back(h);
  return kept;
}

std::string redact_body(std::string_view body, std::string_view content_type,
                        const config::Redact& rules) {
  if (rules.body.empty() || body.empty()) return std::string(body);
  boost::system::error_code ec;
  auto doc = boost::json::parse(body, ec);
  if (ec) {
    if (policy::is_form_media_type(content_type)) return redact_form(body, rules);
    // JSON the rules cannot reach into: none of it is kept (as for an
    // answer cut before it was stored).
    if (may_be_json(body, content_type)) return {};
    return std::string(body);
  }
  // JSON, whatever its label says (a provider may ignore the label): the
  // rules apply to the document.
  bool changed = false;
  for (const auto& pointer : rules.body) {
    boost::system::error_code pec;
    if (auto* v = doc.find_pointer(pointer, pec)) {
      *v = redacted_marker;
      changed = true;
    }
  }
  // A key written twice in one object keeps only its last value in the
  // document: a field the rules name may hide in an earlier one
  // ({"card":{"number":"4242..."},"card":null}). Such a body is kept as the
  // document, one value a key, redacted.
  if (!changed && json_members(body, kDocumentDepth) != members_of(doc)) changed = true;
  if (!changed) return std::string(body);
  auto redacted = boost::json::serialize(doc);
  // A number past a double's range serialises as Infinity, which is not
  // JSON: such a document is not kept either.
  if (!json_members(redacted, kDocumentDepth)) return {};
  return redacted;
}

std::string redact_target(std::string_view target, const config::Redact& rules) {
  return redact_target_query(target, rules);
}

std::string redact_request(const RequestSnapshot& request, const config::Redact& rules) {
  // Written directly (one per guarded write, on the network thread): the
  // members in the order a document would have them, the strings escaped
  // as its serializer would. Only a JSON body goes through a document.
  std::string out;
  out.reserve(64 + request.method.size() + request.target.size() + request.body.size() +
              detail::headers_json_size(request.headers));
  out += "{\"method\":";
  detail::append_json_string(out, request.method);
  out += ",\"target\":";
  detail::append_json_string(out, redact_target(request.target, rules));
  out += ",\"headers\":";
  detail::append_headers_json(out, request.headers, [&](std::string_view name) { return is_secret_header(name, rules); });
  out += ",\"body\":";
  std::string redacted;
  std::string_view body = request.body;
  if (!rules.body.empty()) body = redacted = redact_body(body, header_value(request.headers, "Content-Type"), rules);
  // A JSON body stays JSON, so an escalation package can quote its fields:
  // as it was sent (numbers as written, no digit lost), once it is known to
  // be JSON; any other body is a JSON string.
  if (is_json_text(body)) {
    out += body;
  } else {
    detail::append_json_string(out, body);
  }
  out += '}';
  return out;
}

boost::json::value parse_snapshot(std::string_view text, boost::system::error_code& ec) {
  boost::json::parse_options options;
  options.allow_invalid_utf8 = true;
  return boost::json::parse(text, ec, {}, options);
}

StoredResponse redact_response(StoredResponse response, const config::Redact& rules,
                               std::uint64_t cap) {
  if (!rules.body.empty()) {
    auto const type = header_value(response.headers, "Content-Type");
    // Cut before it got here (longer than limits.guarded_answer), a JSON body
    // does not parse, so redact.body could not reach into it: none is kept.
    if (response.truncated && !policy::is_form_media_type(type)) response.body.clear();
    response.body = redact_body(response.body, type, rules);
  }
  std::erase_if(response.headers, [&](const auto& h) { return is_secret_header(h.first, rules); });
  if (response.body.size() > cap) {
    response.body.resize(cap);
    response.truncated = true;
  }
  return response;
}

}  // namespace idemgate::ledger
