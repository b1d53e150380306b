#pragma once
// A model in a GGUF file: the architecture (llama, qwen2, qwen3, qwen2moe, qwen3moe, gpt-oss) and its shape from the
// metadata ({arch}.embedding_length, .block_count, .attention.head_count, ...), the weights by llama.cpp's tensor
// names (token_embd, blk.N.attn_q, ...; llama's q/k rows already pair adjacent elements for RoPE, the others' are
// reordered), and the embedded vocabulary (tokenizer.ggml.*: "llama" SentencePiece by scores, "gpt2" byte-level
// BPE with the pre-tokenizer tokenizer.ggml.pre names) and chat template.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/formats/gguf.hpp"
#include "gpu/model_config.hpp"
#include "gpu/tokenizer.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// What a GGUF file's metadata says of its model.
struct gguf_model {
  std::string architecture;  ///< "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe" or "gpt-oss"
  model_config config;
  bool tied_embeddings = false;  ///< no output.weight: the embedding classifies
  std::vector<int32_t> eos_ids;  ///< tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id
  std::string chat_template;     ///< tokenizer.chat_template; empty: none
  std::string bos_text, eos_text;  ///< the texts of BOS and EOS, for the template
};

/// Reads the metadata; corrupt_model naming the file and the key when it lacks one or holds what this engine
/// does not compute.
result<gguf_model> read_gguf_model(const gguf_file& file);

/// The weights: matrices as stored (F32, F16, BF16, Q8_0, Q5_0, Q4_K, Q6_K, MXFP4) or in `weight_type`.
result<model_weights> load_gguf_weights(const gguf_file& file, const gguf_model& model,
                                        std::optional<dtype> weight_type = std::nullopt);

/// The regex a byte-level vocabulary's pre-tokenizer splits text with, by tokenizer.ggml.pre (llama-bpe, qwen2,
/// gpt-4o, default); none for another.
std::optional<std::string> gguf_pre_tokenizer_regex(const std::string& pre);

/// The embedded vocabulary.
result<std::shared_ptr<const tokenizer>> load_gguf_tokenizer(const gguf_file& file, const gguf_model& model);

}  // namespace illm::gpu
