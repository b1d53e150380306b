#include "tests/actors/support.hpp"

#include <doctest/doctest.h>

#include "gpu/backend_registry.hpp"
#include "gpu/generate.hpp"

namespace illm::test {

const gpu::loaded_model& stories15m() {
  static const auto loaded = gpu::load_model("stories15M");
  if (!loaded.is_ok()) FAIL("stories15M is needed: run deploy/fetch-model.sh (", loaded.error().message(), ")");
  return loaded.value();
}

std::vector<int32_t> alone_on_cpu(const std::vector<int32_t>& prompt, int max_tokens, gpu::dtype kv_type) {
  auto device = gpu::make_backend("cpu", 2);
  REQUIRE(device.is_ok());
  gpu::generate_options o;
  o.prompt_ids = prompt;
  o.max_tokens = max_tokens;
  o.ignore_eos = true;
  o.kv_type = kv_type;
  auto out = gpu::generate(stories15m(), *device.value(), o);
  REQUIRE(out.is_ok());
  return out->token_ids;
}

}  // namespace illm::test
