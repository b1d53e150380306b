#include "gpu/engine.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gpu/text.hpp"

namespace illm::gpu {

result<std::unique_ptr<engine>> engine::create(std::shared_ptr<const model_weights> weights, backend& device,
                                               const engine_options& options) {
  // The placement frees its memory through `device`, which outlives the engine and so the placement.
  auto placed = device_weights::place(std::move(weights), std::shared_ptr<backend>(std::shared_ptr<backend>{}, &device));
  if (!placed.is_ok()) return placed.error();
  return create(std::move(placed).value(), device, options);
}

result<std::unique_ptr<engine>> engine::create(std::shared_ptr<const device_weights> weights, backend& device,
                                               const engine_options& options) {
  if (options.max_batch_tokens <= 0 || options.max_batch_seqs <= 0)
    return status{status_code::invalid_argument, "engine limits must be positive"};
  if (!weights) return status{status_code::invalid_argument, "no placed weights"};
  std::unique_ptr<engine> e(new engine());
  e->weights_ = std::move(weights);
  e->device_ = &device;
  e->options_ = options;
  ILLM_RETURN_IF_ERROR(e->allocate_buffers());
  return e;
}

kv_layout engine::pool_layout() const {
  const model_config& c = config();
  return {c.n_layers, c.n_kv_heads, c.head_dim(), options_.kv_type};
}

float* engine::owned_floats(size_t floats) {
  if (floats == 0) return nullptr;
  device_ptr p = make_device_buffer(*device_, floats * sizeof(float));
  if (!p) return nullptr;
  owned_.push_back(std::move(p));
  return static_cast<float*>(owned_.back().get());
}

status engine::allocate_buffers() {
  const model_config& c = config();
  const size_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, vocab = c.vocab_size;
  const size_t m = size_t(options_.max_batch_tokens), s = size_t(options_.max_batch_seqs);
  auto buffer = [this](size_t floats) { return owned_floats(floats); };
  x_ = buffer(m * d);
  xb_ = buffer(m * d);
  qkv_ = buffer(m * (q + 2 * kv));
  att_ = buffer(m * q);
  h13_ = buffer(m * 2 * h);
  hb_ = buffer(m * h);
  rope_ = buffer(m * c.head_dim());
  logits_ = buffer((s + size_t(std::max(options_.max_scored_tokens, 0))) * vocab);
  if (!x_ || !xb_ || !qkv_ || !att_ || !h13_ || !hb_ || !rope_ || !logits_)
    return {status_code::out_of_memory, text::format("cannot allocate the engine's buffers on {}", device_->name())};
  return c.has_experts() ? allocate_expert_buffers() : status::ok();
}

bool engine::long_enough_for_lanes(int overlap_min_tokens, int64_t tokens) {
  return overlap_min_tokens > 0 && tokens >= std::max(2, overlap_min_tokens);
}

bool engine::attends_elsewhere(std::span<const batch_entry> batch, uint32_t local) {
  for (const batch_entry& b : batch) {
    const size_t blocks = b.table ? std::min<size_t>(blocks_for_tokens(int64_t(b.pos0) + b.n_tokens), b.table->size()) : 0;
    for (size_t i = 0; i < blocks; ++i)
      if ((*b.table)[i].pool != local) return true;
  }
  return false;
}

bool engine::overlaps(std::span<const batch_entry> batch, const kv_pools& pools) const {
  int64_t tokens = 0;
  for (const batch_entry& b : batch) tokens += b.n_tokens;
  // Decode steps stop at the length check, before any block table is walked.
  return long_enough_for_lanes(options_.overlap_min_tokens, tokens) && attends_elsewhere(batch, pools.local);
}

void engine::split_into_lanes(std::span<const batch_entry> batch, bool overlap) {
  entries_.assign(batch.begin(), batch.end());
  origin_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) origin_[i] = i;
  int rows = 0;
  for (const batch_entry& b : batch) rows += std::max(0, b.n_tokens);
  lanes_.assign(1, {0, entries_.size(), 0, rows});
  if (!overlap) return;
  // The first lane: the entries that start before the middle row, the one across it cut there.
  const int bound = rows / 2;
  size_t i = 0;
  int row = 0;
  while (i < entries_.size() && row + entries_[i].n_tokens <= bound) row += entries_[i++].n_tokens;
  if (row < bound) {
    batch_entry tail = entries_[i];
    const int head = bound - row;
    entries_[i].n_tokens = head;
    entries_[i].sample = false;
    tail.tokens += head;
    tail.pos0 += head;
    tail.n_tokens -= head;
    entries_.insert(entries_.begin() + std::ptrdiff_t(i) + 1, tail);
    origin_.insert(origin_.begin() + std::ptrdiff_t(i) + 1, origin_[i]);
    ++i;
  }
  lanes_ = {{0, i, 0, bound}, {i, entries_.size(), bound, rows}};
}

namespace {

/// An error when `ref` (the block of position `pos` of sequence `seq`) is absent, or is no block of its pool
/// where that pool is in this process (a remote holder checks its own).
status check_block(const kv_pools& pools, uint64_t seq, const block_ref& ref, int64_t pos) {
  if (ref.absent())
    return {status_code::invalid_argument,
            text::format("sequence {}: the block of position {} is absent (its KV is to be computed again)", seq, pos)};
  const kv_pool* pool = ref.pool < pools.by_id.size() ? pools.by_id[ref.pool] : nullptr;
  if (pool && ref.block >= pool->total_blocks())
    return {status_code::invalid_argument, text::format("sequence {}: position {} is in block {} of pool {}, which has {}",
                                                        seq, pos, ref.block, ref.pool, pool->total_blocks())};
  return status::ok();
}

}  // namespace

status engine::plan(const kv_pools& pools) {
  const model_config& c = config();
  const std::span<const batch_entry> batch = entries_;
  tokens_.clear();
  pos_.clear();
  slots_.clear();
  slot_pools_.clear();
  sample_rows_.clear();
  sampling_rows_.clear();
  logit_row_.assign(origin_.empty() ? 0 : origin_.back() + 1, -1);
  int scored = 0;
  plans_.assign(batch.size(), {});
  size_t partial_floats = 0;
  const size_t row_floats = size_t(c.n_heads) * (2 + c.head_dim());
  for (size_t i = 0; i < batch.size(); ++i) {
    const batch_entry& b = batch[i];
    const int64_t end = int64_t(b.pos0) + b.n_tokens;
    if (b.n_tokens <= 0 || b.pos0 < 0 || !b.table || b.table->size() < blocks_for_tokens(end))
      return {status_code::invalid_argument,
              text::format("sequence {}: {} tokens at position {} need {} blocks, its table has {}", b.seq_id,
                          b.n_tokens, b.pos0, blocks_for_tokens(end), b.table ? b.table->size() : 0)};
    if (int(tokens_.size()) + b.n_tokens > options_.max_batch_tokens)
      return {status_code::invalid_argument,
              text::format("batch exceeds the engine's {} tokens per step", options_.max_batch_tokens)};
    plans_[i].row0 = int(tokens_.size());
    for (int t = 0; t < b.n_tokens; ++t) {
      const int32_t token = b.tokens[t], pos = b.pos0 + t;
      if (token < 0 || token >= c.vocab_size)
        return {status_code::invalid_argument, text::format("sequence {}: token id {} outside the vocabulary",
                                                           b.seq_id, token)};
      const block_ref& ref = (*b.table)[size_t(pos / kv_block_tokens)];
      if (ref.pool >= pools.by_id.size() || !pools.by_id[ref.pool])
        return {status_code::invalid_argument,
                text::format("sequence {}: position {} is in pool {}, which this engine cannot write", b.seq_id, pos,
                            ref.pool)};
      tokens_.push_back(token);
      pos_.push_back(pos);
      slots_.push_back(ref.block * kv_block_tokens + uint32_t(pos % kv_block_tokens));
      slot_pools_.push_back(ref.pool);
    }
    if (b.every_token && (scored += b.n_tokens) > options_.max_scored_tokens)
      return {status_code::invalid_argument,
              text::format("a step scores {} tokens or more, the engine has rows of logits for {}", scored,
                           options_.max_scored_tokens)};
    if ((b.every_token || b.sample) && logit_row_[origin_[i]] < 0) logit_row_[origin_[i]] = int(sample_rows_.size());
    if (b.every_token)
      for (int t = b.n_tokens; t > 0; --t) sample_rows_.push_back(int32_t(tokens_.size()) - t);
    else if (b.sample)
      sample_rows_.push_back(int32_t(tokens_.size()) - 1);
    if (b.sample) sampling_rows_.push_back(int32_t(sample_rows_.size()) - 1);
    // Group the blocks the entry's queries can see by the pool that holds them, local first.
    auto& groups = plans_[i].groups;
    for (uint32_t blk = 0; blk < blocks_for_tokens(end); ++blk) {
      const block_ref& ref = (*b.table)[blk];
      ILLM_RETURN_IF_ERROR(check_block(pools, b.seq_id, ref, int64_t(blk) * kv_block_tokens));
      auto it = std::find_if(groups.begin(), groups.end(), [&](const block_group& g) { return g.pool == ref.pool; });
      if (it == groups.end()) {
        groups.push_back({ref.pool, {}, {}});
        it = groups.end() - 1;
      }
      it->blocks.push_back(ref.block);
      it->block_pos.push_back(int32_t(blk) * kv_block_tokens);
    }
    std::stable_partition(groups.begin(), groups.end(), [&](const block_group& g) { return g.pool == pools.local; });
    plans_[i].partial_offset = partial_floats;
    partial_floats += groups.size() * size_t(b.n_tokens) * row_floats;
  }
  if (partial_floats > partials_floats_) {
    partials_.reset();
    partials_ = make_device_buffer(*device_, partial_floats * sizeof(float));
    if (!partials_) return {status_code::out_of_memory, "cannot allocate attention partials"};
    partials_floats_ = partial_floats;
  }
  if (!device_->host_memory()) remote_partials_.resize(partials_floats_);
  return stage_indices();
}

status engine::stage_indices() {
  if (device_->host_memory()) {
    tokens_dev_ = tokens_.data();
    pos_dev_ = pos_.data();
    slots_dev_ = slots_.data();
    sample_rows_dev_ = sample_rows_.data();
    for (entry_plan& p : plans_)
      if (!p.groups.empty()) {
        p.local_blocks = p.groups[0].blocks.data();
        p.local_block_pos = p.groups[0].block_pos.data();
      }
    return status::ok();
  }
  // One upload per step: tokens, positions, slots, sample rows, then each local group's block ids and
  // positions, as 32-bit words.
  std::vector<int32_t>& w = step_words_;
  w.assign(tokens_.begin(), tokens_.end());
  w.insert(w.end(), pos_.begin(), pos_.end());
  w.insert(w.end(), slots_.begin(), slots_.end());
  w.insert(w.end(), sample_rows_.begin(), sample_rows_.end());
  std::vector<size_t> group_at(plans_.size(), 0);
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (plans_[i].groups.empty()) continue;
    group_at[i] = w.size();
    const block_group& g = plans_[i].groups[0];
    w.insert(w.end(), g.blocks.begin(), g.blocks.end());
    w.insert(w.end(), g.block_pos.begin(), g.block_pos.end());
  }
  if (w.size() > step_words_capacity_) {
    step_words_dev_.reset();
    step_words_capacity_ = std::max(w.size(), 2 * step_words_capacity_);
    step_words_dev_ = make_device_buffer(*device_, step_words_capacity_ * sizeof(int32_t));
    if (!step_words_dev_) return {status_code::out_of_memory, "cannot allocate the step's index arrays"};
  }
  const auto* base = static_cast<const int32_t*>(step_words_dev_.get());
  const size_t m = tokens_.size();
  tokens_dev_ = base;
  pos_dev_ = base + m;
  slots_dev_ = reinterpret_cast<const uint32_t*>(base + 2 * m);
  sample_rows_dev_ = base + 3 * m;
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (plans_[i].groups.empty()) continue;
    plans_[i].local_blocks = reinterpret_cast<const uint32_t*>(base + group_at[i]);
    plans_[i].local_block_pos = base + group_at[i] + plans_[i].groups[0].blocks.size();
  }
  return device_->upload(step_words_dev_.get(), w.data(), w.size() * sizeof(int32_t));
}

status engine::store_new_kv(int layer, const lane_span& lane, const kv_pools& pools) {
  const model_config& c = config();
  const size_t ld = size_t(c.q_dim()) + 2 * c.kv_dim();
  const float* k = qkv_ + c.q_dim();
  const float* v = k + c.kv_dim();
  // Consecutive rows that go to the same pool are written in one call.
  for (size_t r0 = size_t(lane.r0); r0 < size_t(lane.r1);) {
    size_t r1 = r0 + 1;
    while (r1 < size_t(lane.r1) && slot_pools_[r1] == slot_pools_[r0]) ++r1;
    const kv_pool& pool = *pools.by_id[slot_pools_[r0]];
    ILLM_RETURN_IF_ERROR(device_->store_kv(k + r0 * ld, v + r0 * ld, ld, int(r1 - r0), c.n_kv_heads, c.head_dim(),
                                           pool.layer_view(layer), slots_dev_ + r0));
    r0 = r1;
  }
  return status::ok();
}

std::array<float*, 3> engine::partials_of(float* base, size_t i, size_t g) const {
  // Partials of entry i, group g: m [n_q][n_heads], e [n_q][n_heads], ma [n_q][n_heads][hd], stacked per
  // kind over the groups as backend::merge reads them.
  const model_config& c = config();
  const size_t n_rows = size_t(entries_[i].n_tokens) * c.n_heads, n_groups = plans_[i].groups.size();
  base += plans_[i].partial_offset;
  return {base + g * n_rows, base + (n_groups + g) * n_rows, base + 2 * n_groups * n_rows + g * n_rows * c.head_dim()};
}

status engine::begin_attention(int layer, int lane, const kv_pools& pools, attention_router* router) {
  const model_config& c = config();
  const size_t ld = size_t(c.q_dim()) + 2 * c.kv_dim();
  const bool host = device_->host_memory();
  float* partials = static_cast<float*>(partials_.get());
  const lane_span& span = lanes_[size_t(lane)];
  auto& jobs = jobs_[size_t(lane)];
  auto& job_entries = job_entries_[size_t(lane)];
  jobs.clear();
  job_entries.clear();
  for (size_t i = span.e0; i < span.e1; ++i)
    for (size_t g = 0; g < plans_[i].groups.size(); ++g) {
      const block_group& group = plans_[i].groups[g];
      if (group.pool == pools.local) continue;
      job_entries.push_back(i);
      // Routers take host pointers: on a device backend, the queries and partials are staged.
      auto [m, e, ma] = partials_of(host ? partials : remote_partials_.data(), i, g);
      const float* q = host ? qkv_ + size_t(plans_[i].row0) * ld : nullptr;
      jobs.push_back({entries_[i].seq_id, layer, group.pool, group.blocks, group.block_pos, q, ld,
                      pos_.data() + plans_[i].row0, entries_[i].n_tokens, m, e, ma, entries_[i].foreign_request,
                      entries_[i].foreign_owner});
    }
  if (!jobs.empty()) {
    if (!router)
      return {status_code::invalid_argument,
              text::format("sequence {} has blocks in pool {} but the engine has no attention router",
                           jobs[0].seq_id, jobs[0].holder)};
    if (!host) ILLM_RETURN_IF_ERROR(stage_remote_queries(lane));
    ILLM_RETURN_IF_ERROR(router->begin(lane, jobs));
  }
  // Local MicroAttention of the lane's sequences, in one batch, runs while the remote jobs are under way.
  local_jobs_.clear();
  for (size_t i = span.e0; i < span.e1; ++i) {
    const auto& groups = plans_[i].groups;
    if (groups.empty() || groups[0].pool != pools.local) continue;
    auto [m, e, ma] = partials_of(partials, i, 0);
    local_jobs_.push_back({qkv_ + size_t(plans_[i].row0) * ld, ld, pos_dev_ + plans_[i].row0, entries_[i].n_tokens,
                           plans_[i].local_blocks, plans_[i].local_block_pos, int(groups[0].blocks.size()), m, e,
                           ma});
  }
  if (local_jobs_.empty()) return status::ok();
  return device_->micro_attention_batch(c.attention().at_layer(layer), pools.by_id[pools.local]->layer_view(layer),
                                        local_jobs_);
}

status engine::end_attention(int lane, const float* sinks, attention_router* router) {
  const model_config& c = config();
  float* partials = static_cast<float*>(partials_.get());
  const lane_span& span = lanes_[size_t(lane)];
  if (!jobs_[size_t(lane)].empty()) {
    ILLM_RETURN_IF_ERROR(router->finish(lane));
    if (!device_->host_memory()) ILLM_RETURN_IF_ERROR(upload_remote_partials(lane));
  }
  for (size_t i = span.e0; i < span.e1; ++i) {
    auto [m, e, ma] = partials_of(partials, i, 0);
    ILLM_RETURN_IF_ERROR(device_->merge(m, e, ma, int(plans_[i].groups.size()), entries_[i].n_tokens, c.n_heads,
                                        c.head_dim(), att_ + size_t(plans_[i].row0) * c.q_dim(), size_t(c.q_dim()),
                                        sinks));
  }
  stats_.remote_jobs += jobs_[size_t(lane)].size();
  return status::ok();
}

status engine::stage_remote_queries(int lane) {
  const model_config& c = config();
  const size_t ld = size_t(c.q_dim()) + 2 * c.kv_dim();
  // The rows of each entry with remote jobs (q, k and v alike: one copy per entry) into the lane's remote_q_.
  auto& staged = remote_q_[size_t(lane)];
  auto& jobs = jobs_[size_t(lane)];
  const auto& job_entries = job_entries_[size_t(lane)];
  remote_q_offset_.assign(entries_.size(), SIZE_MAX);
  size_t floats = 0;
  for (size_t entry : job_entries)
    if (remote_q_offset_[entry] == SIZE_MAX) {
      remote_q_offset_[entry] = floats;
      floats += size_t(entries_[entry].n_tokens) * ld;
    }
  staged.resize(floats);
  for (size_t i = 0; i < entries_.size(); ++i)
    if (remote_q_offset_[i] != SIZE_MAX)
      ILLM_RETURN_IF_ERROR(device_->download(staged.data() + remote_q_offset_[i], qkv_ + size_t(plans_[i].row0) * ld,
                                             size_t(entries_[i].n_tokens) * ld * sizeof(float)));
  for (size_t j = 0; j < jobs.size(); ++j) jobs[j].q = staged.data() + remote_q_offset_[job_entries[j]];
  return status::ok();
}

status engine::upload_remote_partials(int lane) {
  const model_config& c = config();
  float* partials = static_cast<float*>(partials_.get());
  for (const remote_attention_job& job : jobs_[size_t(lane)]) {
    // The router wrote into remote_partials_ at the offsets the device buffer has.
    const size_t rows = size_t(job.n_q) * c.n_heads;
    for (auto [host, count] : {std::pair{job.m, rows}, std::pair{job.e, rows},
                               std::pair{job.ma, rows * size_t(c.head_dim())}})
      ILLM_RETURN_IF_ERROR(device_->upload(partials + (host - remote_partials_.data()), host, count * sizeof(float)));
  }
  return status::ok();
}

status engine::classify() {
  const model_config& c = config();
  const int n = int(sample_rows_.size());
  stats_.sampled = n;
  stats_.logit_row = logit_row_;
  // The KV a step wrote is read on other streams once it returns (the attention servers, moves out of the pool):
  // a step that samples nothing waits for its work here; one that samples does when sample() downloads.
  if (n == 0) return device_->synchronize();
  // Logits only for the rows that sample: the classifier is the largest matrix of a small model.
  ILLM_RETURN_IF_ERROR(device_->gather_rows(x_, size_t(c.dim), sample_rows_dev_, n, c.dim, xb_, size_t(c.dim)));
  ILLM_RETURN_IF_ERROR(device_->rmsnorm(xb_, size_t(c.dim), weights_->rms_final(), n, c.dim, c.norm_eps, xb_, size_t(c.dim)));
  ILLM_RETURN_IF_ERROR(project(xb_, size_t(c.dim), n, c.dim, weights_->classifier(), logits_, size_t(c.vocab_size), false));
  return status::ok();
}

status engine::sample(std::span<const sampling_params> params, std::span<const sampling_history> history,
                      std::span<uint64_t> rng, std::span<int32_t> out, std::span<token_logprobs> logprobs) {
  const size_t n = params.size();
  if (n != sampling_rows_.size() || rng.size() != n || out.size() != n)
    return {status_code::invalid_argument,
            text::format("{} sampling rows, {} sampling parameters", sampling_rows_.size(), n)};
  const int vocab = config().vocab_size;
  const bool plain = std::all_of(params.begin(), params.end(), [](const sampling_params& p) { return p.plain(); });
  if (plain && size_t(stats_.sampled) == n)  // rows 0..n-1, one per sampling entry
    return device_->sample(logits_, size_t(vocab), int(n), vocab, params.data(), rng.data(), out.data());
  if (!plain && (history.size() != n || logprobs.size() != n))
    return {status_code::invalid_argument, "sampling on the host needs each row's history and logprobs"};
  host_row_.resize(size_t(vocab));
  for (size_t i = 0; i < n; ++i) {
    const size_t row = size_t(sampling_rows_[i]);
    if (params[i].plain()) {
      ILLM_RETURN_IF_ERROR(device_->sample(logits_ + row * size_t(vocab), size_t(vocab), 1, vocab, &params[i], &rng[i],
                                           &out[i]));
      continue;
    }
    ILLM_RETURN_IF_ERROR(copy_logits(int(row), host_row_.data()));
    out[i] = choose_token(host_row_.data(), vocab, params[i], history[i], rng[i], &logprobs[i]);
  }
  return status::ok();
}

status engine::copy_logits(int i, float* host) const {
  if (i < 0 || i >= stats_.sampled)
    return {status_code::invalid_argument, text::format("no sampled row {} in the last step", i)};
  const size_t vocab = size_t(config().vocab_size);
  return device_->download(host, logits_ + size_t(i) * vocab, vocab * sizeof(float));
}

status engine::project(const float* x, size_t ldx, int m, int k, const packed_matrix& w, float* y, size_t ldy,
                       bool accumulate) {
  int row = 0;
  for (int i = 0; i < w.n_parts; ++i) {
    const matrix_part& p = w.parts[size_t(i)];
    ILLM_RETURN_IF_ERROR(p.tiled ? device_->gemm_tiles(x, ldx, m, k, p.data, p.type, p.rows, y + row, ldy, accumulate)
                                 : device_->gemm(x, ldx, m, k, p.data, p.type, size_t(k), p.rows, y + row, ldy,
                                                 accumulate));
    row += p.rows;
  }
  return status::ok();
}

status engine::layer_front(int layer, int lane, const kv_pools& pools, attention_router* router) {
  const model_config& c = config();
  const device_weights::layer& w = weights_->at(layer);
  const lane_span& span = lanes_[size_t(lane)];
  const size_t d = c.dim, q = c.q_dim(), ld_qkv = q + 2 * c.kv_dim(), r0 = size_t(span.r0);
  const int m = span.r1 - span.r0, hd = c.head_dim();
  float* qkv = qkv_ + r0 * ld_qkv;
  ILLM_RETURN_IF_ERROR(device_->rmsnorm(x_ + r0 * d, d, w.rms_att, m, c.dim, c.norm_eps, xb_ + r0 * d, d));
  ILLM_RETURN_IF_ERROR(project(xb_ + r0 * d, d, m, c.dim, w.wqkv, qkv, ld_qkv, false));
  if (w.bqkv) ILLM_RETURN_IF_ERROR(device_->add_bias(qkv, ld_qkv, m, int(ld_qkv), w.bqkv));
  if (w.q_norm) {
    ILLM_RETURN_IF_ERROR(device_->head_rmsnorm(qkv, ld_qkv, m, c.n_heads, hd, w.q_norm, c.norm_eps));
    ILLM_RETURN_IF_ERROR(device_->head_rmsnorm(qkv + q, ld_qkv, m, c.n_kv_heads, hd, w.k_norm, c.norm_eps));
  }
  ILLM_RETURN_IF_ERROR(device_->rope(qkv, ld_qkv, m, c.n_heads, hd, rope_ + r0 * size_t(hd)));
  ILLM_RETURN_IF_ERROR(device_->rope(qkv + q, ld_qkv, m, c.n_kv_heads, hd, rope_ + r0 * size_t(hd)));
  ILLM_RETURN_IF_ERROR(store_new_kv(layer, span, pools));
  ILLM_RETURN_IF_ERROR(mark_foreign_written(layer, lane, pools));
  return begin_attention(layer, lane, pools, router);
}

status engine::mark_foreign_written(int layer, int lane, const kv_pools& pools) {
  const lane_span& span = lanes_[size_t(lane)];
  std::vector<uint32_t> written;
  for (size_t i = span.e0; i < span.e1; ++i) {
    const batch_entry& e = entries_[i];
    // An entry cut between the lanes is written once its last part is.
    if (!e.foreign_request || (i + 1 < entries_.size() && origin_[i + 1] == origin_[i])) continue;
    size_t first = i;
    while (first > 0 && origin_[first - 1] == origin_[i]) --first;
    const int64_t begin = entries_[first].pos0, end = int64_t(e.pos0) + e.n_tokens;
    // Only whole blocks: a chunk starts and (but for a prompt's last) ends at a block boundary.
    for (int64_t b = (begin + kv_block_tokens - 1) / kv_block_tokens; b < end / kv_block_tokens; ++b)
      if ((*e.table)[size_t(b)].pool == pools.local) written.push_back((*e.table)[size_t(b)].block);
  }
  if (written.empty()) return status::ok();
  // What the readers of these blocks see must be on the device first.
  ILLM_RETURN_IF_ERROR(device_->synchronize());
  pools.by_id[pools.local]->mark_written(written, uint32_t(layer + 1));
  return status::ok();
}

status engine::layer_back(int layer, int lane, attention_router* router) {
  const model_config& c = config();
  const device_weights::layer& w = weights_->at(layer);
  const lane_span& span = lanes_[size_t(lane)];
  const size_t d = c.dim, q = c.q_dim(), r0 = size_t(span.r0);
  const int m = span.r1 - span.r0;
  float *x = x_ + r0 * d, *xb = xb_ + r0 * d;
  ILLM_RETURN_IF_ERROR(end_attention(lane, w.sinks, router));
  ILLM_RETURN_IF_ERROR(project(att_ + r0 * q, q, m, int(q), w.wo, x, d, true));
  if (w.bo) ILLM_RETURN_IF_ERROR(device_->add_bias(x, d, m, c.dim, w.bo));
  ILLM_RETURN_IF_ERROR(device_->rmsnorm(x, d, w.rms_ffn, m, c.dim, c.norm_eps, xb, d));
  return feed_forward(w, r0, m);
}

status engine::feed_forward(const device_weights::layer& w, size_t r0, int m) {
  const model_config& c = config();
  const size_t d = c.dim, h = c.hidden_dim;
  float *x = x_ + r0 * d, *xb = xb_ + r0 * d;
  if (c.has_experts()) return experts_forward(w, xb, x, m);
  float *h13 = h13_ + r0 * 2 * h, *hb = hb_ + r0 * h;
  ILLM_RETURN_IF_ERROR(project(xb, d, m, c.dim, w.w13, h13, 2 * h, false));
  ILLM_RETURN_IF_ERROR(device_->silu_mul(h13, h13 + h, 2 * h, m, int(h), hb, h, c.activation));
  return project(hb, h, m, int(h), w.w2, x, d, true);
}

status engine::step(std::span<const batch_entry> batch, const kv_pools& pools, attention_router* router) {
  const model_config& c = config();
  stats_ = {};
  if (int(batch.size()) > options_.max_batch_seqs)
    return {status_code::invalid_argument,
            text::format("batch of {} sequences exceeds the engine's {}", batch.size(), options_.max_batch_seqs)};
  if (pools.local >= pools.by_id.size() || !pools.by_id[pools.local])
    return {status_code::invalid_argument, "the engine's local pool is missing"};
  // A step that failed may have left the other lane's round in flight: its answers must not land in this one.
  if (router) router->cancel();
  split_into_lanes(batch, overlaps(batch, pools));
  ILLM_RETURN_IF_ERROR(plan(pools));
  const int m = int(tokens_.size());
  if (m == 0) return status::ok();
  const matrix_part& table = weights_->embedding();
  ILLM_RETURN_IF_ERROR(device_->embed(tokens_dev_, m, table.data, table.type, c.dim, x_, size_t(c.dim)));
  ILLM_RETURN_IF_ERROR(device_->rope_table(pos_dev_, m, c.head_dim(), c.rope(), rope_));
  // Each lane's layer is sent off to the holders before the other lane's is finished: while they attend
  // one lane's queries, this device runs the other's dense layers. One lane runs the layers in turn.
  const int lanes = int(lanes_.size());
  for (int lane = 0; lane < lanes; ++lane) ILLM_RETURN_IF_ERROR(layer_front(0, lane, pools, router));
  for (int l = 0; l < c.n_layers; ++l)
    for (int lane = 0; lane < lanes; ++lane) {
      ILLM_RETURN_IF_ERROR(layer_back(l, lane, router));
      if (l + 1 < c.n_layers) ILLM_RETURN_IF_ERROR(layer_front(l + 1, lane, pools, router));
    }
  stats_.tokens = m;
  stats_.partials.assign(batch.size(), 0);
  for (size_t i = 0; i < plans_.size(); ++i)
    stats_.partials[origin_[i]] = std::max(stats_.partials[origin_[i]], int(plans_[i].groups.size()));
  return classify();
}

}  // namespace illm::gpu
