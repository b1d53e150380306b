#pragma once
// MicroAttention whose queries come from host memory and whose partials go back to host memory, on any
// backend: how a holder answers another instance's queries (they arrive from the network and their
// partials leave by it). On a backend whose memory is host memory the call reads and writes the host
// arrays directly; on a device, the inputs go up in one upload and the partials come down, through a
// device buffer kept between calls.

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// One host-side MicroAttention call (see attention_job for the layouts; every pointer is host memory).
struct host_attention_job {
  const float* q = nullptr;
  size_t q_ld = 0;
  const int32_t* q_pos = nullptr;
  int n_q = 0;
  std::span<const uint32_t> blocks;
  std::span<const int32_t> block_pos;
  float* m = nullptr;
  float* e = nullptr;
  float* ma = nullptr;
};

/// Runs host_attention_jobs on one backend. One thread at a time, as the backend.
class staged_attention {
 public:
  explicit staged_attention(backend& device) : device_(device) {}

  /// MicroAttention of `job` over `kv` with `shape`'s head counts.
  status run(const attention_shape& shape, const kv_layer_view& kv, const host_attention_job& job);

 private:
  /// At least `floats` words of device buffer.
  status reserve(size_t floats);

  backend& device_;
  std::vector<float> staged_;  // a job's inputs, as 32-bit words
  device_ptr buffer_;
  size_t capacity_ = 0;
};

}  // namespace illm::gpu
