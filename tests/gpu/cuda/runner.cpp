// The parity test runner: registration, checks, the backend under test, and main().
#include "tests/gpu/cuda/runner.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "gpu/cuda/cuda_backend.hpp"

namespace illm::test {

namespace {

struct run_state {
  std::unique_ptr<gpu::backend> device;
  int failures = 0;  // of the running case
};

run_state& state() {
  static run_state s;
  return s;
}

}  // namespace

std::vector<test_case>& test_cases() {
  static std::vector<test_case> cases;
  return cases;
}

case_registration::case_registration(const char* suite, const char* name, void (*body)()) {
  test_cases().push_back({suite, name, body});
}

void record_failure(const std::string& message, const char* file, int line) {
  ++state().failures;
  std::printf("    %s:%d: %s\n", file, line, message.c_str());
  std::fflush(stdout);
}

void skip(const std::string& reason) { throw case_stop{true, reason}; }

gpu::backend& device() { return *state().device; }

bool emulated() {
#if ILLM_CUDA_EMULATION
  return true;
#else
  return false;
#endif
}

gpu::cpu::cpu_backend& reference() {
  static gpu::cpu::cpu_backend b(2, gpu::cpu::cpu_mode::reference);
  return b;
}

gpu::cpu::cpu_backend& fast_cpu() {
  static gpu::cpu::cpu_backend b(2, gpu::cpu::cpu_mode::fast);
  return b;
}

double nmse(std::span<const float> got, std::span<const float> ref) {
  if (got.size() != ref.size()) return INFINITY;
  double error = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i]) && std::isnan(got[i])) continue;
    if (std::isinf(ref[i]) && got[i] == ref[i]) continue;
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) return INFINITY;
    const double d = double(got[i]) - double(ref[i]);
    error += d * d;
    norm += double(ref[i]) * ref[i];
  }
  return norm > 0 ? error / norm : error;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace illm::test

namespace {

/// Runs one case; returns 0 passed, 1 failed, 2 skipped.
int run_case(const illm::test::test_case& c) {
  using namespace illm::test;
  state().failures = 0;
  std::printf("[ run  ] %s / %s\n", c.suite.c_str(), c.name.c_str());
  std::fflush(stdout);
  try {
    c.body();
  } catch (const case_stop& stop) {
    if (stop.skipped) {
      std::printf("[ skip ] %s: %s\n", c.name.c_str(), stop.reason.c_str());
      return 2;
    }
  }
  std::printf("[%s] %s\n", state().failures ? " FAIL " : "  ok  ", c.name.c_str());
  return state().failures ? 1 : 0;
}

}  // namespace

/// test_cuda [--list] [--suite S] [--case NAME]: exit 0 when every selected case passed, 1 on a failure,
/// 77 (CTest's SKIP_RETURN_CODE) when there is no CUDA device or every selected case skipped.
int main(int argc, char** argv) {
  using namespace illm;
  std::string suite, name;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--list"))
      list = true;
    else if (!std::strcmp(argv[i], "--suite") && i + 1 < argc)
      suite = argv[++i];
    else if (!std::strcmp(argv[i], "--case") && i + 1 < argc)
      name = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--list] [--suite S] [--case NAME]\n", argv[0]);
      return 2;
    }
  }
  if (list) {
    for (const auto& c : test::test_cases()) std::printf("%s / %s\n", c.suite.c_str(), c.name.c_str());
    return 0;
  }
  auto made = gpu::cuda::cuda_backend::create({0, true});
  if (!made.is_ok()) {
    std::printf("skipped: %s\n", made.error().message().c_str());  // "no CUDA device: <why>"
    return 77;
  }
  const gpu::cuda::device_info info = made.value()->info();
  std::printf("device: %s (compute capability %d.%d, %d SMs, %.1f GiB)%s\n", info.name.c_str(), info.major,
              info.minor, info.sm_count, double(info.total_bytes) / (1u << 30),
              test::emulated() ? " - the kernels run on the CPU emulation" : "");
  test::state().device = std::move(made).value();
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : test::test_cases()) {
    if ((!suite.empty() && c.suite != suite) || (!name.empty() && c.name != name)) continue;
    switch (run_case(c)) {
      case 0: ++passed; break;
      case 1: ++failed; break;
      default: ++skipped; break;
    }
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  test::state().device.reset();
  if (failed > 0) return 1;
  return passed == 0 ? 77 : 0;
}
