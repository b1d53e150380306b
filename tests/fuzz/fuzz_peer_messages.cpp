// The control plane's messages as another process can send them: CAF's binary deserializer (what its wire
// protocol uses) over each message type that a peer's rManager, instance, front end or the gManager can reach
// (the first byte picks the type). Actor handles in them (joins, views, requests, room chunks) are read in an
// actor system of the fuzzer's own, as a receiving process reads them: a handle of this node is looked up in its
// registry, one of another node needs the middleman's proxies, which this system has not, and is refused.
// What decodes must serialize and decode again to the same bytes.
#include <caf/all.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "actors/messages.hpp"

using namespace illm::actors;

namespace {

/// The receiving process's actor system, made once and never destroyed (CAF 0.17's system does not survive the
/// destruction of statics at exit).
caf::actor_system& receiving_system() {
  static caf::actor_system& system = *new caf::actor_system(*new caf::actor_system_config);
  return system;
}

/// Decodes a T from `data`; when it decodes, checks that it serializes to bytes that decode to the same bytes.
template <class T>
void round_trip(const uint8_t* data, size_t size) {
  caf::actor_system& sys = receiving_system();
  caf::binary_deserializer source{sys, reinterpret_cast<const char*>(data), size};
  T x;
  if (source(x)) return;  // refused: nothing more to check
  std::vector<char> first, second;
  caf::binary_serializer sink{sys, first};
  if (sink(x)) std::abort();
  caf::binary_deserializer again{sys, first};
  T y;
  if (again(y)) std::abort();
  caf::binary_serializer sink2{sys, second};
  if (sink2(y) || first != second) std::abort();
}

using decoder = void (*)(const uint8_t*, size_t);

template <class... Ts>
constexpr std::array<decoder, sizeof...(Ts)> decoders_of(message_types<Ts...>) {
  return {round_trip<Ts>...};
}

/// One decoder per message a peer can send (actors/messages.hpp).
constexpr auto decoders = decoders_of(peer_messages{});

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  decoders[data[0] % std::size(decoders)](data + 1, size - 1);
  return 0;
}
