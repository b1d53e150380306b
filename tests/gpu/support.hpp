#pragma once
// Helpers shared by the engine tests: the real model, the golden data, and greedy runs of an engine
// over K in-process pools with the logits of every step.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "gpu/attention_router.hpp"
#include "gpu/backend.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/model_files.hpp"

namespace illm::test {

/// stories15M, loaded once; fails the calling test (with the fix) when the files are absent.
const gpu::loaded_model& real_model();

/// tests/data/golden/stories15M-greedy.json.
const nlohmann::json& golden();

/// Where deploy/fetch-tokenizers.sh puts the Hugging Face tokenizer files and the reference's answers.
std::filesystem::path hf_tokenizers_dir();

/// A cpu backend with two threads (fast kernels), shared by the tests.
gpu::backend& cpu_device();

/// Wraps the router that a greedy run uses, e.g. to tamper with partials.
using router_decorator = std::function<std::unique_ptr<gpu::attention_router>(gpu::attention_router& inner)>;

/// A greedy run: generated ids (each step's argmax) and the logits [vocab] at every step.
struct greedy_run {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;
};

/// Options of run_greedy.
struct greedy_options {
  int pools = 1;            ///< KV pools the blocks are spread over
  int chunk = 512;          ///< prefill tokens per step
  uint64_t seed = 7;        ///< spreads the blocks
  bool keep_logits = false;
  int overlap_min_tokens = 512;  ///< the engine's: steps this long with remote blocks run as two lanes
  gpu::dtype kv_type = gpu::dtype::f32;  ///< the pools' element type
  router_decorator decorate;
  gpu::backend* device = nullptr;  ///< default: cpu_device()
  /// Weights already placed on `device` (shared with other engines); none: the engine places its own.
  std::shared_ptr<const gpu::device_weights> placed;
  /// The ids the run continues with, step by step, whatever it chose (an oracle's, to compare each step's choice
  /// in the oracle's context); past them, its own.
  std::vector<int32_t> forced;
};

/// Runs `prompt` greedily for `n_new` tokens (no stop at EOS) through the engine step by step.
greedy_run run_greedy(std::shared_ptr<const gpu::model_weights> weights, const std::vector<int32_t>& prompt,
                      int n_new, const greedy_options& options);

}  // namespace illm::test
