// The attention wire format as a peer can send it (actors/logic/attention_wire.hpp): attend and partials
// messages are decoded; what decodes must encode again to bytes that decode to the same encoding.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "actors/logic/attention_wire.hpp"

using namespace illm::actors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  (void)partials_tag(bytes);
  (void)is_decode_attend(bytes);
  if (auto a = decode_attend(bytes); a.is_ok()) {
    const std::vector<uint8_t> again = encode(a.value());
    auto b = decode_attend(again);
    if (!b.is_ok() || encode(b.value()) != again) std::abort();
  }
  if (auto p = decode_partials(bytes); p.is_ok()) {
    const std::vector<uint8_t> again = encode(p.value());
    auto q = decode_partials(again);
    if (!q.is_ok() || encode(q.value()) != again) std::abort();
  }
  return 0;
}
