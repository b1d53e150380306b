#pragma once
// An attention_router for pools in the same process: each job runs MicroAttention on the pool that
// holds its blocks, as the holder's attention server would. It counts the bytes a network would carry
// (queries out, partials back), which are the only data DistAttention moves per step. Jobs hold host
// pointers; on a backend whose memory is not host memory each job's inputs are uploaded and its
// partial downloaded, as a holder's attention server would receive and answer them.

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/attention_router.hpp"
#include "gpu/backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/staged_attention.hpp"

namespace illm::gpu {

/// Routes remote MicroAttention to other pools of this process.
class pool_router final : public attention_router {
 public:
  /// `pools` by id (the engine's); jobs run on `device` with the model's head counts.
  pool_router(backend& device, const kv_pools& pools, const attention_shape& shape);

  /// Runs the jobs at once (both lanes alike): they are done when begin() returns.
  status begin(int lane, std::span<const remote_attention_job> jobs) override;
  status finish(int) override { return status::ok(); }

  /// Bytes of queries sent and partials returned so far.
  uint64_t query_bytes() const { return query_bytes_; }
  uint64_t partial_bytes() const { return partial_bytes_; }
  uint64_t jobs() const { return jobs_; }

 private:
  const kv_pools& pools_;
  staged_attention staged_;
  attention_shape shape_;
  uint64_t query_bytes_ = 0, partial_bytes_ = 0, jobs_ = 0;
};

}  // namespace illm::gpu
