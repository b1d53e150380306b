#pragma once
// Content keys of full KV blocks. A block's key is the SHA-256 of its parent's key and its 16 tokens, and the first
// block's parent is a root that names the model (its fingerprint: shape, weight and KV types, a sample of its
// weights) and a namespace (a tenant's, when the operator keeps tenants apart, and a request's cache_salt), so one
// key names a whole prefix: equal keys mean equal KV, and no client can make two prefixes share a key without
// breaking SHA-256 (a chain of a weaker hash could be forged to read another tenant's KV).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace illm::gpu {

/// A 256-bit content key of a full block (or, as a root, of what every chain starts from): a SHA-256 digest.
struct block_key {
  std::array<uint64_t, 4> words{};
  bool operator==(const block_key&) const = default;
};

/// A full block of a request with what a cache needs to take it: where it lies (pool, physical block), its place
/// in the request (index), its key, its parent's key and its tokens.
struct keyed_block {
  uint32_t pool = 0, block = 0, index = 0;
  block_key key, parent;
  std::vector<int32_t> tokens;
};

/// What a pool's KV is: the model that computed it (its fingerprint: shape, weight types, a sample of its weights)
/// and the pool's element type. Blocks move, are copied and are read only between pools of one identity (f16 and
/// bf16 blocks have the same size: nothing else would tell them apart).
struct kv_identity {
  block_key model;      ///< the model's fingerprint (zero: unknown, as a test's made-up pool)
  std::string kv_type;  ///< "f32", "f16", "bf16"
  bool operator==(const kv_identity&) const = default;
  /// What a pool of identity `other` holds that this one's does not, as an operator reads it ("its pool holds ..."):
  /// "" when the two hold the same KV.
  std::string mismatch(const kv_identity& other) const {
    if (other.model != model) return "KV of another model (other weights or another shape)";
    if (other.kv_type != kv_type) return "KV of type " + other.kv_type + ", not " + kv_type;
    return {};
  }
};

/// Hash of a key for unordered containers (the key is a hash already).
struct block_key_hash {
  size_t operator()(const block_key& k) const { return size_t(k.words[0]); }
};

/// SplitMix64's finaliser: every bit of `x` reaches every bit of the result (keys, and made-up token ids).
uint64_t mix_bits(uint64_t x);

/// The root of every chain of one model: its identity (model_identity: shape, weight and KV types, fingerprint) and
/// a namespace.
block_key root_key(std::string_view model_identity, std::string_view name_space);

/// The root of a namespace's chains under a model's root (a tenant's prefixes never meet another's).
block_key scoped_root(const block_key& model_root, std::string_view name_space);

/// The namespace of a request's prefix-cache keys: its API key's scope (empty: shared) and its cache_salt (empty:
/// none), joined so that no two pairs give one namespace.
std::string cache_namespace(std::string_view key_scope, std::string_view cache_salt);

/// The key of the full block `tokens` (kv_block_tokens of them) after the prefix that `parent` names.
block_key next_key(const block_key& parent, std::span<const int32_t> tokens);

}  // namespace illm::gpu
