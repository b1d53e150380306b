#pragma once
// Perplexity of a model on a text, as llama.cpp's llama-perplexity measures it: the text's tokens (BOS first) cut
// into chunks of n_ctx, each chunk's first token BOS where the vocabulary has one, each chunk run alone, and the
// negative log-likelihood of every token of its second half given the tokens before it in the chunk.

#include <functional>
#include <string>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/model_files.hpp"

namespace illm::gpu {

/// How to measure.
struct perplexity_options {
  int n_ctx = 512;        ///< tokens per chunk
  int max_chunks = 0;     ///< 0: every whole chunk of the text
  dtype kv_type = dtype::f32;
  /// Called after each chunk with (chunks done, chunks in all, perplexity so far).
  std::function<void(int, int, double)> progress;
};

/// What was measured.
struct perplexity_result {
  double perplexity = 0;           ///< exp of the mean negative log-likelihood
  double mean_nll = 0;
  int chunks = 0, n_ctx = 0;
  int64_t text_tokens = 0;         ///< tokens of the whole text
  int64_t scored_tokens = 0;       ///< tokens whose likelihood counted
  std::vector<double> running;     ///< perplexity after each chunk
  double seconds = 0;
};

/// The perplexity of `model` on `text` on `device`; invalid_argument when the text holds no whole chunk.
result<perplexity_result> perplexity(const loaded_model& model, backend& device, const std::string& text,
                                     const perplexity_options& options);

}  // namespace illm::gpu
