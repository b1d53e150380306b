#include "gpu/block_key.hpp"

#include <cstring>

#include <openssl/evp.h>
#include <openssl/sha.h>

namespace illm::gpu {

namespace {

/// SHA-256 of `bytes` as a key (its words read little-endian, as they are compared and hashed only): the algorithm
/// fetched once and a context of this thread's (OpenSSL 3's one-shot SHA256() fetches it at every call, which costs
/// several times the hash of a block's 104 bytes).
block_key digest(const std::string& bytes) {
  struct context {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~context() { EVP_MD_CTX_free(ctx); }
  };
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);  // fetched once, kept
  thread_local const context local;
  block_key k;
  static_assert(sizeof(k.words) == SHA256_DIGEST_LENGTH);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!local.ctx || !sha256 || EVP_DigestInit_ex2(local.ctx, sha256, nullptr) != 1 ||
      EVP_DigestUpdate(local.ctx, bytes.data(), bytes.size()) != 1 || EVP_DigestFinal_ex(local.ctx, out, &length) != 1 ||
      length != SHA256_DIGEST_LENGTH)
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out);  // the one-shot path, slower
  std::memcpy(k.words.data(), out, sizeof k.words);
  return k;
}

/// Appends `v` as 8 bytes.
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

/// Appends a text with its length first (so that ("ab", "c") and ("a", "bc") differ).
void put_text(std::string& out, std::string_view text) {
  put_u64(out, text.size());
  out.append(text);
}

void put_key(std::string& out, const block_key& k) { out.append(reinterpret_cast<const char*>(k.words.data()), sizeof k.words); }

}  // namespace

uint64_t mix_bits(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

block_key root_key(std::string_view model_identity, std::string_view name_space) {
  std::string bytes = "illm prefix root";
  put_text(bytes, model_identity);
  put_text(bytes, name_space);
  return digest(bytes);
}

block_key scoped_root(const block_key& model_root, std::string_view name_space) {
  if (name_space.empty()) return model_root;
  std::string bytes = "illm prefix scope";
  put_key(bytes, model_root);
  put_text(bytes, name_space);
  return digest(bytes);
}

std::string cache_namespace(std::string_view key_scope, std::string_view cache_salt) {
  if (cache_salt.empty()) return std::string(key_scope);
  std::string out;
  put_text(out, key_scope);
  put_text(out, cache_salt);
  return out;
}

block_key next_key(const block_key& parent, std::span<const int32_t> tokens) {
  std::string bytes;
  bytes.reserve(sizeof parent.words + 8 + tokens.size() * 4);
  put_key(bytes, parent);
  put_u64(bytes, tokens.size());
  for (int32_t t : tokens) bytes.append(reinterpret_cast<const char*>(&t), sizeof t);
  return digest(bytes);
}

}  // namespace illm::gpu
