// The buffer a guarded answer's body is read into: it grows only as far as
// the call's share of limits.guarded_budget does, and its allocation is
// exactly what that share holds for it, so the budget counts the bytes
// answers really hold rather than limits.guarded_answer for every call.
#pragma once

#include "proxy/body_budget.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace idemgate::proxy {

class AnswerBuffer {
public:
  // The read step: the most one read fills, as the budget grows by at least this.
  static constexpr std::uint64_t step = 64 * 1024;

  // body: the (empty) string the answer is read into; budget: null when
  // the buffer is not counted.
  AnswerBuffer(std::string& body, BodyBudget::Reservation* budget) noexcept : body_(body), budget_(budget) {}

  // Room for at least one more byte, body.size() < cap: what is already
  // allocated, else the whole of `wanted` (the body's known length), else
  // the slice the budget already holds, else twice the buffer (few copies
  // and budget updates for a long chunked answer), else one step. false:
  // the budget has no room for more.
  bool make_room(std::uint64_t cap, std::optional<std::uint64_t> wanted);

  // Bytes allocated past body.size().
  std::uint64_t room() const noexcept { return capacity_ - body_.size(); }
  std::uint64_t capacity() const noexcept { return capacity_; }

private:
  bool grow_to(std::uint64_t capacity);

  std::string& body_;
  BodyBudget::Reservation* budget_;
  std::uint64_t capacity_ = 0;
};

}  // namespace idemgate::proxy
