#pragma once
// A small test runner for the cuda parity tests, which must build where doctest is not installed (the
// GPU-only build). Cases register with ILLM_CASE(suite, name); ILLM_CHECK records a failure and goes on,
// ILLM_REQUIRE stops the case; a case may skip with a reason. main() (runner_main.cpp) opens the
// backend under test and runs the cases of one suite, or all.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/text.hpp"

namespace illm::test {

/// A registered case.
struct test_case {
  std::string suite, name;
  void (*body)();
};

/// Every registered case, in registration order.
std::vector<test_case>& test_cases();

/// Registers a case at static initialisation.
struct case_registration {
  case_registration(const char* suite, const char* name, void (*body)());
};

/// Records a failed check of the running case.
void record_failure(const std::string& message, const char* file, int line);

/// Thrown to end the running case early (a failed requirement, or a skip).
struct case_stop {
  bool skipped;
  std::string reason;
};

/// Ends the running case as skipped.
[[noreturn]] void skip(const std::string& reason);

/// The backend under test (the cuda backend, or its CPU emulation).
gpu::backend& device();
/// Whether the backend under test is the CPU emulation (tests shrink their largest sizes there).
bool emulated();
/// The cpu backend in reference mode (plain loops), and in fast mode.
gpu::cpu::cpu_backend& reference();
gpu::cpu::cpu_backend& fast_cpu();

/// Normalised mean squared error: sum (got - ref)^2 / sum ref^2 (the plain sum when ref is all zero);
/// infinite when the sizes differ or got holds a NaN or an infinity that ref does not.
double nmse(std::span<const float> got, std::span<const float> ref);

/// n values uniform in [-scale, scale) from a seeded generator.
std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f);

/// An array in the device's memory, filled from and read back to the host.
template <class T>
class device_array {
 public:
  device_array(gpu::backend& dev, size_t n) : dev_(&dev), n_(n), ptr_(gpu::make_device_buffer(dev, sizeof(T) * n)) {}
  device_array(gpu::backend& dev, const std::vector<T>& host) : device_array(dev, host.size()) {
    const gpu::status s = write(host);
    if (!s.is_ok()) record_failure("upload: " + s.message(), __FILE__, __LINE__);
  }
  T* get() const { return static_cast<T*>(ptr_.get()); }
  size_t size() const { return n_; }
  gpu::status write(const std::vector<T>& host) { return dev_->upload(ptr_.get(), host.data(), sizeof(T) * n_); }
  std::vector<T> read() const {
    std::vector<T> host(n_);
    const gpu::status s = dev_->download(host.data(), ptr_.get(), sizeof(T) * n_);
    if (!s.is_ok()) record_failure("download: " + s.message(), __FILE__, __LINE__);
    return host;
  }

 private:
  gpu::backend* dev_;
  size_t n_;
  gpu::device_ptr ptr_;
};

}  // namespace illm::test

#define ILLM_CONCAT_INNER(a, b) a##b
#define ILLM_CONCAT(a, b) ILLM_CONCAT_INNER(a, b)

/// Defines and registers a test case.
#define ILLM_CASE(suite, name)                                                                              \
  static void ILLM_CONCAT(illm_case_, __LINE__)();                                                          \
  static const ::illm::test::case_registration ILLM_CONCAT(illm_registration_, __LINE__)(                   \
      suite, name, &ILLM_CONCAT(illm_case_, __LINE__));                                                     \
  static void ILLM_CONCAT(illm_case_, __LINE__)()

/// Records a failure with a formatted message (text::format) when `cond` is false; the case goes on.
#define ILLM_CHECK(cond, ...)                                                                               \
  do {                                                                                                      \
    if (!(cond)) ::illm::test::record_failure(::illm::gpu::text::format(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)

/// Ends the case with a failure when `cond` is false.
#define ILLM_REQUIRE(cond, ...)                                                                             \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      ::illm::test::record_failure(::illm::gpu::text::format(__VA_ARGS__), __FILE__, __LINE__);            \
      throw ::illm::test::case_stop{false, "requirement failed"};                                          \
    }                                                                                                       \
  } while (0)

/// Ends the case with a failure when the status is not ok.
#define ILLM_REQUIRE_OK(expr)                                                                               \
  do {                                                                                                      \
    const ::illm::gpu::status illm_status_ = (expr);                                                        \
    ILLM_REQUIRE(illm_status_.is_ok(), "{}: {}", #expr, illm_status_.message());                           \
  } while (0)
