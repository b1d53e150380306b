#pragma once
// Status and result types of the engine: gpu/ never throws across its boundary.

#include <optional>
#include <string>
#include <utility>

namespace illm::gpu {

/// What went wrong, coarse enough for callers to branch on.
enum class status_code {
  ok,
  invalid_argument,  ///< a caller passed something out of range
  io_error,          ///< a file could not be opened or read
  corrupt_model,     ///< a model or tokenizer file is malformed
  out_of_memory,     ///< an allocation failed
  out_of_blocks,     ///< a KV pool has no free block
  unsupported,       ///< the backend or build lacks the feature
  backend_error,     ///< the device or its library reported an error
  internal,          ///< an invariant of the project itself is broken
};

/// Name of a status code, for messages.
const char* to_string(status_code code);

/// The outcome of an operation: ok, or a code with a message that names what is wrong.
class [[nodiscard]] status {
 public:
  status() = default;
  status(status_code code, std::string message) : code_(code), message_(std::move(message)) {}

  /// The success value.
  static status ok() { return {}; }

  bool is_ok() const { return code_ == status_code::ok; }
  status_code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  status_code code_ = status_code::ok;
  std::string message_;
};

/// A value or the status that explains why there is none.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : value_(std::move(value)) {}
  result(status error) : error_(std::move(error)) {}

  bool is_ok() const { return value_.has_value(); }
  const status& error() const { return error_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  status error_;
};

}  // namespace illm::gpu

/// Returns from the enclosing function when `expr` (a status of gpu/ or of transport/) is not ok.
#define ILLM_RETURN_IF_ERROR(expr) \
  do {                             \
    auto s_ = (expr);              \
    if (!s_.is_ok()) return s_;    \
  } while (0)
