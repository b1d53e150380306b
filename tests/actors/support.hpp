#pragma once
// What the embedded-cluster tests share: the real model, and the ids a request has alone on one cpu pool.

#include <cstdint>
#include <vector>

#include "gpu/model_files.hpp"

namespace illm::test {

/// stories15M, loaded once (the test fails when it is missing: deploy/fetch-model.sh fetches it).
const gpu::loaded_model& stories15m();

/// Greedy ids of a request alone on one cpu pool with room for all of it.
std::vector<int32_t> alone_on_cpu(const std::vector<int32_t>& prompt, int max_tokens,
                                  gpu::dtype kv_type = gpu::dtype::f32);

}  // namespace illm::test
