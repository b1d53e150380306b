#include "gpu/pool_router.hpp"

#include <algorithm>
#include <cstring>

#include "gpu/text.hpp"

namespace illm::gpu {

pool_router::pool_router(backend& device, const kv_pools& pools, const attention_shape& shape)
    : device_(device), pools_(pools), shape_(shape) {}

status pool_router::begin(int, std::span<const remote_attention_job> jobs) {
  for (const remote_attention_job& job : jobs) {
    if (job.holder >= pools_.by_id.size() || !pools_.by_id[job.holder])
      return {status_code::invalid_argument, text::format("no pool {} to attend", job.holder)};
    const kv_layer_view view = pools_.by_id[job.holder]->layer_view(job.layer);
    if (device_.host_memory())
      ILLM_RETURN_IF_ERROR(device_.micro_attention(shape_, job.q, job.q_ld, job.q_pos, job.n_q, view,
                                                   job.blocks.data(), job.block_pos.data(), int(job.blocks.size()),
                                                   job.m, job.e, job.ma));
    else
      ILLM_RETURN_IF_ERROR(attend_staged(job, view));
    const uint64_t rows = uint64_t(job.n_q) * shape_.n_heads;
    query_bytes_ += rows * shape_.head_dim * sizeof(float) + job.n_q * sizeof(int32_t);
    partial_bytes_ += rows * (2 + shape_.head_dim) * sizeof(float);
    ++jobs_;
  }
  return status::ok();
}

status pool_router::attend_staged(const remote_attention_job& job, const kv_layer_view& view) {
  // Words of the staging buffer: q rows, q_pos, blocks, block_pos, then the outputs m, e, ma.
  const size_t n_q = size_t(job.n_q), nb = job.blocks.size(), hd = size_t(shape_.head_dim);
  const size_t rows = n_q * size_t(shape_.n_heads);
  const size_t q_floats = n_q == 0 ? 0 : (n_q - 1) * job.q_ld + size_t(shape_.n_heads) * hd;
  const size_t pos_at = q_floats, blocks_at = pos_at + n_q, block_pos_at = blocks_at + nb;
  const size_t m_at = block_pos_at + nb, e_at = m_at + rows, ma_at = e_at + rows, total = ma_at + rows * hd;
  staged_.resize(m_at);
  std::copy(job.q, job.q + q_floats, staged_.begin());
  std::memcpy(staged_.data() + pos_at, job.q_pos, n_q * sizeof(int32_t));
  std::memcpy(staged_.data() + blocks_at, job.blocks.data(), nb * sizeof(uint32_t));
  std::memcpy(staged_.data() + block_pos_at, job.block_pos.data(), nb * sizeof(int32_t));
  if (total > staged_capacity_) {
    staged_dev_.reset();
    staged_capacity_ = std::max(total, 2 * staged_capacity_);
    staged_dev_ = make_device_buffer(device_, staged_capacity_ * sizeof(float));
    if (!staged_dev_) return {status_code::out_of_memory, "cannot allocate remote attention staging"};
  }
  auto* dev = static_cast<float*>(staged_dev_.get());
  ILLM_RETURN_IF_ERROR(device_.upload(dev, staged_.data(), m_at * sizeof(float)));
  ILLM_RETURN_IF_ERROR(device_.micro_attention(shape_, dev, job.q_ld, reinterpret_cast<const int32_t*>(dev + pos_at),
                                               job.n_q, view, reinterpret_cast<const uint32_t*>(dev + blocks_at),
                                               reinterpret_cast<const int32_t*>(dev + block_pos_at), int(nb),
                                               dev + m_at, dev + e_at, dev + ma_at));
  ILLM_RETURN_IF_ERROR(device_.download(job.m, dev + m_at, rows * sizeof(float)));
  ILLM_RETURN_IF_ERROR(device_.download(job.e, dev + e_at, rows * sizeof(float)));
  return device_.download(job.ma, dev + ma_at, rows * hd * sizeof(float));
}

}  // namespace illm::gpu
