#include "gpu/cuda/cublas_api.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "gpu/text.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

#if !ILLM_CUDA_EMULATION
/// Opens cuBLAS by its soname (found like any library: the program's run path, LD_LIBRARY_PATH, the
/// system's), then by the path of the toolkit it was built against; empty with the reasons otherwise.
void* open_library(std::string& why) {
  for (const char* name : {ILLM_CUBLAS_SONAME, ILLM_CUBLAS_LIBRARY}) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    why += text::format("{}{}", why.empty() ? "" : "; ", dlerror());
  }
  return nullptr;
}

template <class F>
bool find(void* library, const char* symbol, F& out) {
  out = reinterpret_cast<F>(dlsym(library, symbol));
  return out != nullptr;
}
#endif

result<cublas_api> open_cublas() {
  cublas_api api;
#if ILLM_CUDA_EMULATION
  api.create = &cublasCreate;
  api.destroy = &cublasDestroy;
  api.set_stream = &cublasSetStream;
  api.gemm_ex = &cublasGemmEx;
#else
  std::string why;
  void* library = open_library(why);
  if (!library) return status{status_code::unsupported, "cannot open cuBLAS: " + why};
  // cublas_v2.h maps the first three names to their _v2 symbols.
  if (!find(library, "cublasCreate_v2", api.create) || !find(library, "cublasDestroy_v2", api.destroy) ||
      !find(library, "cublasSetStream_v2", api.set_stream) || !find(library, "cublasGemmEx", api.gemm_ex))
    return status{status_code::unsupported, text::format("cuBLAS lacks a function: {}", dlerror())};
#endif
  return api;
}

}  // namespace

result<const cublas_api*> load_cublas() {
  static std::once_flag once;
  static result<cublas_api> loaded = status{status_code::internal, "cuBLAS not loaded"};
  std::call_once(once, [] { loaded = open_cublas(); });
  if (!loaded.is_ok()) return loaded.error();
  return &loaded.value();
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
