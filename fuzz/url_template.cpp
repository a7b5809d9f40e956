// reconcile.query.url templates: the syntax check and the expansion with a
// key, a receipt and {/json/pointer} values from a request body.
// Input: line 1 the template, line 2 the key, line 3 the receipt, the rest the body.
#include "fuzz/split.hpp"
#include "policy/reconcile.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <cstdlib>

using namespace idemgate::policy;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto rest = idemgate::fuzz::as_text(data, size);
  const auto url_template = idemgate::fuzz::take_line(rest);
  const auto key = idemgate::fuzz::take_line(rest);
  const auto receipt = idemgate::fuzz::take_line(rest);
  (void)url_template_error(url_template);
  boost::system::error_code ec;
  const auto body = boost::json::parse(rest, ec);
  const TemplateValues values{key, receipt, ec ? nullptr : &body};
  const auto expanded = expand_url_template(url_template, values);
  if (expanded) {
    // Placeholder values are percent-encoded: none can add a delimiter the
    // template did not have, and no brace is left.
    if (expanded->find('{') != std::string::npos) std::abort();
    for (const char c : {' ', '/', '?', '#', '&', '='}) {
      if (std::count(expanded->begin(), expanded->end(), c) > std::count(url_template.begin(), url_template.end(), c))
        std::abort();
    }
  }
  return 0;
}
