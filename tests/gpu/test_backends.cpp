// The backend registry picks cuda only where a GPU is and says why not otherwise, the build's backends
// are listed, and the host fp16/bf16 conversions round to nearest even exactly as the device does
// (they give the cpu reference the values a 16-bit pool holds).
#include <cmath>
#include <limits>

#include "gpu/backend_registry.hpp"
#include "gpu/half.hpp"
#include "tests/gpu/support.hpp"
#if ILLM_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif

using namespace illm;

TEST_SUITE("gpu") {
  TEST_CASE("the registry lists this build's backends and auto runs where it can") {
    const auto built = gpu::compiled_backends();
    CHECK(std::find(built.begin(), built.end(), "cpu") != built.end());
#if ILLM_HAVE_CUDA
    CHECK(std::find(built.begin(), built.end(), "cuda") != built.end());
    const bool gpu_present = gpu::cuda::probe_devices().count > 0;
#else
    CHECK(std::find(built.begin(), built.end(), "cuda") == built.end());
    const bool gpu_present = false;
#endif
    auto automatic = gpu::make_backend("auto", 1);
    REQUIRE(automatic.is_ok());
    CHECK(automatic.value()->name() == (gpu_present ? "cuda" : "cpu"));
    auto cuda = gpu::make_backend("cuda", 1);
    CHECK(cuda.is_ok() == gpu_present);
    if (!gpu_present) {
      CHECK(cuda.error().code() == gpu::status_code::unsupported);
      MESSAGE("cuda refused here: ", cuda.error().message());
    }
    CHECK(gpu::make_backend("cpu", 1).value()->name() == "cpu");
    CHECK(gpu::make_backend("tpu", 1).error().code() == gpu::status_code::unsupported);
  }

  TEST_CASE("fp16 and bf16 conversions round to nearest even") {
    CHECK(gpu::float_to_f16(1.0f) == 0x3c00);
    CHECK(gpu::float_to_f16(-2.0f) == 0xc000);
    CHECK(gpu::float_to_f16(65504.0f) == 0x7bff);                  // the largest half
    CHECK(gpu::float_to_f16(65519.0f) == 0x7bff);                  // just below the rounding edge
    CHECK(gpu::float_to_f16(65520.0f) == 0x7c00);                  // rounds to infinity
    CHECK(gpu::float_to_f16(std::ldexp(1.0f, -24)) == 0x0001);     // the smallest subnormal
    CHECK(gpu::float_to_f16(std::ldexp(1.0f, -25)) == 0x0000);     // a tie: to even (zero)
    CHECK(gpu::float_to_f16(std::ldexp(3.0f, -25)) == 0x0002);     // a tie: to even (two)
    CHECK(gpu::float_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // a tie between 1 and 1 + 2^-10
    CHECK(gpu::float_to_f16(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);  // a tie: to the even neighbour
    CHECK(std::isnan(gpu::f16_to_float(gpu::float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(gpu::bf16_to_float(gpu::float_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);  // tie to even
    CHECK(gpu::bf16_to_float(gpu::float_to_bf16(1.0f + std::ldexp(3.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
    // Every half round-trips through float exactly.
    for (uint32_t h = 0; h < 0x10000; ++h) {
      if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
      REQUIRE(gpu::float_to_f16(gpu::f16_to_float(uint16_t(h))) == h);
    }
  }
}
