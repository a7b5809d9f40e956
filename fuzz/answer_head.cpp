// An upstream's answer header as the pass-through path reads and rewrites
// it: the flat AnswerHead (views into the read bytes, folded values copied)
// must render what Beast's parser and fields render (field lines compared
// in name order: see answer_head_paths.hpp), with the same framing, and copied into Beast's fields (the relay path) the same
// again. Input: one byte of framing (client version, keep-alive, HEAD),
// then the bytes an upstream sends.
#include "fuzz/split.hpp"
#include "tests/proxy/answer_head_paths.hpp"

#include <cstdlib>

using namespace idemgate::test;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Framing const f{(data[0] & 1) ? 10u : 11u, (data[0] & 2) == 0, (data[0] & 4) != 0};
  const auto bytes = idemgate::fuzz::as_text(data + 1, size - 1);
  AnswerHead head;
  auto const beast = through_beast(bytes, f);
  auto const flat = through_flat(bytes, f, head);
  if (beast.ok != flat.ok) std::abort();
  if (!beast.ok) return 0;
  if (!same_head(flat.head, beast.head) || flat.header_size != beast.header_size || flat.chunked != beast.chunked ||
      flat.done != beast.done || flat.keep_alive != beast.keep_alive || flat.need_eof != beast.need_eof ||
      flat.content_length != beast.content_length)
    std::abort();
  if (!same_head(through_copy(head, bytes, f), beast.head)) std::abort();
  return 0;
}
