#pragma once
// Hooks of the books' checker (`illm chaos`, actors/chaos/): a tap on everything instances deliver to request
// actors and on where each request is served, read below every de-duplication of the request actor; and defects
// an instance plants on purpose, so that tests can show each one lands in its column of the books.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "actors/placement/types.hpp"

namespace illm::actors {

/// One thing that reached, or left for, a request's client.
struct delivery {
  enum class kind : uint8_t {
    served_by,  ///< the request actor handed the request to `at`, having `position` tokens of its answer
    token,      ///< instance `at` sent `token`
    end,        ///< `at` ended the request with `reason` (at = front_end: the request actor ended it itself)
  };
  /// `at` of an end the request actor decided on its own (its instance left and nobody took it).
  static constexpr instance_id front_end = ~instance_id(0);
  request_id req = 0;
  kind what = kind::token;
  instance_id at = 0;
  int32_t token = 0;
  int32_t position = 0;
  std::string reason;
};

/// Told every delivery, on the thread of the actor that makes it; must be thread-safe. Empty: nobody is.
using delivery_tap = std::function<void(const delivery&)>;

/// A defect an instance plants on purpose (tests of the books only; none in any service).
enum class planted_defect : uint8_t {
  none,
  second_end,      ///< every request's end is sent twice
  wrong_token,     ///< every request's first token is sent as another token
  token_past_max,  ///< one token more than asked is sent before every end
  leaked_block,    ///< the first request to end leaves one block of the pool allocated for ever
  failed_fitting,  ///< every request that reached its length is ended as failed instead
};

/// The name of a defect, as `illm chaos --plant` takes it.
const char* to_string(planted_defect d);
/// The defect named `name`; none when no defect has that name.
std::optional<planted_defect> planted_defect_named(const std::string& name);

}  // namespace illm::actors
