#include "gpu/staged_attention.hpp"

#include <algorithm>
#include <cstring>

namespace illm::gpu {

status staged_attention::run(const attention_shape& shape, const kv_layer_view& kv, const host_attention_job& job) {
  const int nb = int(job.blocks.size());
  if (job.block_pos.size() != job.blocks.size())
    return {status_code::invalid_argument, "staged attention: one first position per block"};
  if (device_.host_memory())
    return device_.micro_attention(shape, job.q, job.q_ld, job.q_pos, job.n_q, kv, job.blocks.data(),
                                   job.block_pos.data(), nb, job.m, job.e, job.ma);
  // Words of the device buffer: q rows, q_pos, blocks, block_pos, then the outputs m, e, ma.
  const size_t n_q = size_t(job.n_q), hd = size_t(shape.head_dim), rows = n_q * size_t(shape.n_heads);
  const size_t q_floats = n_q == 0 ? 0 : (n_q - 1) * job.q_ld + size_t(shape.n_heads) * hd;
  const size_t pos_at = q_floats, blocks_at = pos_at + n_q, block_pos_at = blocks_at + size_t(nb);
  const size_t m_at = block_pos_at + size_t(nb), e_at = m_at + rows, ma_at = e_at + rows, total = ma_at + rows * hd;
  staged_.resize(m_at);
  std::copy(job.q, job.q + q_floats, staged_.begin());
  std::memcpy(staged_.data() + pos_at, job.q_pos, n_q * sizeof(int32_t));
  std::memcpy(staged_.data() + blocks_at, job.blocks.data(), size_t(nb) * sizeof(uint32_t));
  std::memcpy(staged_.data() + block_pos_at, job.block_pos.data(), size_t(nb) * sizeof(int32_t));
  ILLM_RETURN_IF_ERROR(reserve(total));
  auto* dev = static_cast<float*>(buffer_.get());
  ILLM_RETURN_IF_ERROR(device_.upload(dev, staged_.data(), m_at * sizeof(float)));
  ILLM_RETURN_IF_ERROR(device_.micro_attention(shape, dev, job.q_ld, reinterpret_cast<const int32_t*>(dev + pos_at),
                                               job.n_q, kv, reinterpret_cast<const uint32_t*>(dev + blocks_at),
                                               reinterpret_cast<const int32_t*>(dev + block_pos_at), nb, dev + m_at,
                                               dev + e_at, dev + ma_at));
  ILLM_RETURN_IF_ERROR(device_.download(job.m, dev + m_at, rows * sizeof(float)));
  ILLM_RETURN_IF_ERROR(device_.download(job.e, dev + e_at, rows * sizeof(float)));
  return device_.download(job.ma, dev + ma_at, rows * hd * sizeof(float));
}

status staged_attention::reserve(size_t floats) {
  if (floats <= capacity_) return status::ok();
  buffer_.reset();
  capacity_ = std::max(floats, 2 * capacity_);
  buffer_ = make_device_buffer(device_, capacity_ * sizeof(float));
  if (!buffer_) {
    capacity_ = 0;
    return {status_code::out_of_memory, "cannot allocate the staging buffer of remote attention"};
  }
  return status::ok();
}

}  // namespace illm::gpu
