// Printing and parsing of the enums declared in tool.hpp, through the single
// spelling table in enum_names.hpp.
#include "policy/tool.hpp"

#include "policy/enum_names.hpp"

namespace idemgate::policy {

std::string_view to_string(Effect v) noexcept { return enum_name(v); }
std::string_view to_string(AnswerClass v) noexcept { return enum_name(v); }
std::string_view to_string(KeyMode v) noexcept { return enum_name(v); }
std::string_view to_string(ReconcileMode v) noexcept { return enum_name(v); }
std::string_view to_string(PolicyAction v) noexcept { return enum_name(v); }

std::optional<AnswerClass> parse_answer_class(std::string_view text) noexcept {
  return parse_enum<AnswerClass>(text);
}

}  // namespace idemgate::policy
