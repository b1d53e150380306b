#include "gpu/perplexity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "gpu/engine.hpp"
#include "gpu/generate.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

/// -log softmax(logits)[token], in double.
double negative_log_likelihood(const float* logits, int vocab, int32_t token) {
  const float top = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - top);
  return std::log(sum) + top - logits[token];
}

/// The summed negative log-likelihood of tokens [first + 1, n) of `chunk` from one forward pass over it.
result<double> score_chunk(engine& eng, kv_pool& pool, const std::vector<int32_t>& chunk, int first) {
  const int n = int(chunk.size()), vocab = eng.config().vocab_size;
  block_table table;
  for (uint32_t b = 0; b < blocks_for_tokens(n); ++b) {
    auto block = pool.allocate(block_owner{1, 0});
    if (!block.is_ok()) return block.error();
    table.push_back({0, block.value()});
  }
  batch_entry entry{1, chunk.data(), n, 0, &table, false};
  entry.every_token = true;
  kv_pools view{{&pool}, 0};
  status ran = eng.step({&entry, 1}, view, nullptr);
  double total = 0;
  std::vector<float> logits(size_t(vocab), 0.0f);
  for (int j = first; ran.is_ok() && j + 1 < n; ++j) {
    ran = eng.copy_logits(j, logits.data());
    total += negative_log_likelihood(logits.data(), vocab, chunk[size_t(j + 1)]);
  }
  for (const block_ref& ref : table) ILLM_RETURN_IF_ERROR(pool.release(ref.block));
  if (!ran.is_ok()) return ran;
  return total;
}

}  // namespace

result<perplexity_result> perplexity(const loaded_model& model, backend& device, const std::string& text,
                                     const perplexity_options& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.n_ctx < 16) return status{status_code::invalid_argument, "a perplexity chunk needs at least 16 tokens"};
  auto encoded = model.vocab->try_encode(text, true);
  if (!encoded.is_ok()) return encoded.error();
  const std::vector<int32_t> tokens = std::move(encoded).value();
  perplexity_result out;
  out.n_ctx = options.n_ctx;
  out.text_tokens = int64_t(tokens.size());
  int chunks = int(tokens.size() / size_t(options.n_ctx));
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
  if (chunks == 0)
    return status{status_code::invalid_argument,
                  text::format("the text has {} tokens: fewer than one chunk of {}", tokens.size(), options.n_ctx)};
  engine_options eo{options.n_ctx, 1, options.kv_type};
  eo.max_scored_tokens = options.n_ctx;
  auto made = engine::create(model.weights, device, eo);
  if (!made.is_ok()) return made.error();
  auto pool = kv_pool::create(device, made.value()->pool_layout(), blocks_for_tokens(options.n_ctx));
  if (!pool.is_ok()) return pool.error();
  const int first = options.n_ctx / 2;
  const std::optional<int32_t> bos = model.vocab->bos_id();
  double total = 0;
  for (int i = 0; i < chunks; ++i) {
    std::vector<int32_t> chunk(tokens.begin() + int64_t(i) * options.n_ctx, tokens.begin() + int64_t(i + 1) * options.n_ctx);
    if (bos) chunk[0] = *bos;
    auto scored = score_chunk(*made.value(), pool.value(), chunk, first);
    if (!scored.is_ok()) return scored.error();
    total += scored.value();
    out.scored_tokens += options.n_ctx - 1 - first;
    out.running.push_back(std::exp(total / double(out.scored_tokens)));
    if (options.progress) options.progress(i + 1, chunks, out.running.back());
  }
  ILLM_RETURN_IF_ERROR(pool->check());
  out.chunks = chunks;
  out.mean_nll = total / double(out.scored_tokens);
  out.perplexity = std::exp(out.mean_nll);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace illm::gpu
