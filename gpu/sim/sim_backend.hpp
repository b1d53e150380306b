#pragma once
// The sim backend: no math and no memory. It reserves address space for KV pools (so that the pools'
// accounting and block addresses work as on a device) but backs it with nothing: touching a block is a
// bug and faults at once. The simulator's workers take the performance model's step time instead of
// running kernels, so every kernel here reports "unsupported".

#include <map>
#include <mutex>

#include "gpu/backend.hpp"

namespace illm::gpu::sim {

/// A backend for the simulator: address space without memory, no kernels.
class sim_backend final : public backend {
 public:
  std::string name() const override { return "sim"; }
  bool host_memory() const override { return false; }

  /// Reserves `bytes` of address space that is never backed (any access faults).
  void* allocate(size_t bytes) override;
  void deallocate(void* p) override;
  status upload(void*, const void*, size_t) override { return none("upload"); }
  status download(void*, const void*, size_t) override { return none("download"); }
  status copy(void*, const void*, size_t) override { return none("copy"); }
  status synchronize() override { return status::ok(); }

  status gemm(const float*, size_t, int, int, const void*, dtype, size_t, int, float*, size_t, bool) override {
    return none("gemm");
  }
  status rmsnorm(const float*, size_t, const float*, int, int, float, float*, size_t) override {
    return none("rmsnorm");
  }
  status head_rmsnorm(float*, size_t, int, int, int, const float*, float) override { return none("head_rmsnorm"); }
  status add_bias(float*, size_t, int, int, const float*) override { return none("add_bias"); }
  status rope_table(const int32_t*, int, int, const rope_frequencies&, float*) override {
    return none("rope_table");
  }
  status rope(float*, size_t, int, int, int, const float*) override { return none("rope"); }
  status silu_mul(const float*, const float*, size_t, int, int, float*, size_t, const gated_activation&) override {
    return none("silu_mul");
  }
  status embed(const int32_t*, int, const void*, dtype, int, float*, size_t) override { return none("embed"); }
  status gather_rows(const float*, size_t, const int32_t*, int, int, float*, size_t) override {
    return none("gather_rows");
  }
  status add_weighted_rows(const float*, size_t, const int32_t*, const float*, int, int, int, float*, size_t) override {
    return none("add_weighted_rows");
  }
  status store_kv(const float*, const float*, size_t, int, int, int, const kv_layer_view&, const uint32_t*) override {
    return none("store_kv");
  }
  status micro_attention_batch(const attention_shape&, const kv_layer_view&, std::span<const attention_job>) override {
    return none("micro_attention");
  }
  status merge(const float*, const float*, const float*, int, int, int, int, float*, size_t, const float*) override {
    return none("merge");
  }
  status sample(const float*, size_t, int, int, const sampling_params*, uint64_t*, int32_t*) override {
    return none("sample");
  }

 private:
  static status none(const char* op);
  std::mutex mutex_;
  std::map<void*, size_t> reservations_;  // munmap needs the length
};

}  // namespace illm::gpu::sim
