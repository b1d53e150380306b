#pragma once
// Status and result types of the data plane: transport/ never throws across its boundary, and it
// depends on no other layer of the project (the engine in gpu/ has its own, with codes of its own).

#include <string>
#include <utility>
#include <variant>

namespace illm::transport {

/// What went wrong with a data-plane operation, coarse enough for callers to branch on.
enum class status_code {
  ok,
  invalid_argument,  ///< out of range: a region, a peer id, an address
  io_error,          ///< the network or the peer failed
  out_of_memory,     ///< registering or allocating memory failed
  unsupported,       ///< this build or plane lacks the feature
  backend_error,     ///< the communication library reported an error
  internal,          ///< an invariant of the plane itself is broken
};

/// The outcome of an operation: ok, or a code with a message that names what is wrong.
struct [[nodiscard]] status {
  status_code code = status_code::ok;
  std::string message;  ///< what is wrong; empty when ok

  /// The success value.
  static status ok() { return {}; }
  bool is_ok() const { return code == status_code::ok; }
};

/// A value or the status that explains why there is none.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : held_(std::move(value)) {}
  result(status error) : held_(std::move(error)) {}
  bool is_ok() const { return held_.index() == 0; }
  /// The failure; an ok status when there is a value.
  status error() const { return is_ok() ? status{} : std::get<1>(held_); }
  T& value() & { return std::get<0>(held_); }
  const T& value() const& { return std::get<0>(held_); }
  T&& value() && { return std::get<0>(std::move(held_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, status> held_;
};

}  // namespace illm::transport
