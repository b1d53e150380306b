// The doctest runner of test_actors_cuda_emulated: "cuda" is the cuda backend compiled against the CPU
// emulation of CUDA (tests/gpu/cuda/emu), every pointer it is handed checked to be device memory.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu/backend_registry.hpp"
#include "gpu/cuda/cuda_backend.hpp"

int main(int argc, char** argv) {
  illm::gpu::provide_cuda([](int device) -> illm::gpu::result<std::unique_ptr<illm::gpu::backend>> {
    illm::gpu::cuda::cuda_options options;
    options.device = device;
    options.check_pointers = true;
    auto made = illm::gpu::cuda::cuda_backend::create(options);
    if (!made.is_ok()) return made.error();
    return std::unique_ptr<illm::gpu::backend>(std::move(made).value());
  });
  doctest::Context context(argc, argv);
  return context.run();
}
