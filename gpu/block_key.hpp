#pragma once
// Content keys of full KV blocks. A block's key chains its 16 tokens onto its parent's key, and the first
// block's parent is a root that names the model, its weight and KV types and a namespace (a tenant's, when
// the operator keeps tenants apart), so one key names a whole prefix: equal keys mean equal KV.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace illm::gpu {

/// A 128-bit content key of a full block (or, as a root, of what every chain starts from).
struct block_key {
  uint64_t hi = 0, lo = 0;
  bool operator==(const block_key&) const = default;
};

/// A full block of a request with what a cache needs to take it: where it lies (pool, physical block), its place
/// in the request (index), its key, its parent's key and its tokens.
struct keyed_block {
  uint32_t pool = 0, block = 0, index = 0;
  block_key key, parent;
  std::vector<int32_t> tokens;
};

/// Hash of a key for unordered containers (the key is a hash already).
struct block_key_hash {
  size_t operator()(const block_key& k) const { return size_t(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)); }
};

/// SplitMix64's finaliser: every bit of `x` reaches every bit of the result (keys, and made-up token ids).
uint64_t mix_bits(uint64_t x);

/// The root of every chain of one model: its identity (name, weight and KV types) and a namespace.
block_key root_key(std::string_view model_identity, std::string_view name_space);

/// The root of a namespace's chains under a model's root (a tenant's prefixes never meet another's).
block_key scoped_root(const block_key& model_root, std::string_view name_space);

/// The key of the full block `tokens` (kv_block_tokens of them) after the prefix that `parent` names.
block_key next_key(const block_key& parent, std::span<const int32_t> tokens);

}  // namespace illm::gpu
