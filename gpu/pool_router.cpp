#include "gpu/pool_router.hpp"

#include "gpu/text.hpp"

namespace illm::gpu {

pool_router::pool_router(backend& device, const kv_pools& pools, const attention_shape& shape)
    : pools_(pools), staged_(device), shape_(shape) {}

status pool_router::begin(int, std::span<const remote_attention_job> jobs) {
  for (const remote_attention_job& job : jobs) {
    if (job.holder >= pools_.by_id.size() || !pools_.by_id[job.holder])
      return {status_code::invalid_argument, text::format("no pool {} to attend", job.holder)};
    const kv_layer_view view = pools_.by_id[job.holder]->layer_view(job.layer);
    ILLM_RETURN_IF_ERROR(staged_.run(shape_.at_layer(job.layer), view, {job.q, job.q_ld, job.q_pos, job.n_q, job.blocks, job.block_pos,
                                                     job.m, job.e, job.ma}));
    const uint64_t rows = uint64_t(job.n_q) * shape_.n_heads;
    query_bytes_ += rows * shape_.head_dim * sizeof(float) + job.n_q * sizeof(int32_t);
    partial_bytes_ += rows * (2 + shape_.head_dim) * sizeof(float);
    ++jobs_;
  }
  return status::ok();
}

}  // namespace illm::gpu
