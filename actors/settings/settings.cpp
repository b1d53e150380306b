#include "actors/settings/settings.hpp"

#include <algorithm>

#include "gpu/backend_registry.hpp"

namespace illm::actors {

const std::vector<int_setting<batch_settings>>& batch_settings_table() {
  static const std::vector<int_setting<batch_settings>> table{
      {"max_batch_tokens", &batch_settings::max_batch_tokens, 1, 1 << 16, "tokens per engine step (a prefill chunk's)"},
      {"max_batch_seqs", &batch_settings::max_batch_seqs, 1, 4096, "sequences per engine step"},
      {"mixed_step_tokens", &batch_settings::mixed_step_tokens, 0, 1 << 16,
       "a step with decode tokens prefills up to this many tokens in all, spreading prompts over the decode steps "
       "(0: up to max_batch_tokens)"},
      {"prefill_every_steps", &batch_settings::prefill_every_steps, 1, 1024,
       "a step with decode tokens takes prefill chunks only when this many steps have passed since the last that "
       "did: prompts come in fewer, larger chunks (raise max_batch_tokens to match) and most steps of the running "
       "requests are decode alone (1: every step)"},
      {"overlap_min_tokens", &batch_settings::overlap_min_tokens, 0, 1 << 20,
       "steps of this many tokens with remote blocks run as two lanes, dense beside remote attention (0: never)"},
      {"room_prefill_min_chunks", &batch_settings::room_prefill_min_chunks, 0, 1 << 20,
       "a request with a room has its prompt prefilled by the room's holders when this many chunks go out "
       "(0: never; its blocks move into the room)"},
  };
  return table;
}

const std::vector<int_setting<instance_settings>>& instance_settings_table() {
  static const std::vector<int_setting<instance_settings>> table{
      {"kv_blocks_per_instance", &instance_settings::kv_blocks_per_instance, 2, 1 << 24,
       "KV blocks of 16 tokens in each instance's pool"},
      {"landing_blocks", &instance_settings::landing_blocks, 0, 1 << 24,
       "blocks of host memory (pinned) that moves into a pool in device memory land in before their commit uploads "
       "them; a move needing more than are free is refused (0: as many as the pool; unused with pools in host memory)"},
      {"staging_chunk_blocks", &instance_settings::staging_chunk_blocks, 1, 1 << 16,
       "blocks per chunk of a move out of a pool in device memory: the move reads a chunk into one of two pinned "
       "buffers while the one before is on the network (unused with pools in host memory)"},
      {"threads_per_instance", &instance_settings::threads_per_instance, 0, 1024,
       "CPU threads of each instance's engine (0: the cores, shared among the instances of a process)", "threads"},
      {"heartbeat_ms", &instance_settings::heartbeat_ms, 1, 60000, "rManager heartbeat period"},
      {"lease_ms", &instance_settings::lease_ms, 1, 3600000,
       "how long a granted reservation of blocks waits for its commit"},
      {"attention_timeout_ms", &instance_settings::attention_timeout_ms, 1, 3600000,
       "how long a step waits for a holder's partials before the holder counts as failed"},
      {"answer_timeout_ms", &instance_settings::answer_timeout_ms, 1, 3600000,
       "how long an rManager waits for a peer's answer (a reservation, a commit, a promise) before it gives up"},
      {"replica_min_tokens", &instance_settings::replica_min_tokens, 0, 1 << 30,
       "full KV blocks of requests of at least this many tokens get a second copy on another instance, in free "
       "memory given up first when memory is needed (0: no replicas)"},
      {"prefix_copy", &instance_settings::prefix_copy, prefix_copy_never, prefix_copy_always,
       "with --prefix-cache cluster, a run of a prompt's prefix cached on another instance: 0 read where it lies; 1 "
       "(default) copied into this instance's cache when the performance model finds the copy cheaper than reading "
       "it in place for the request's decode (round trips measured to the holder, the copy rate measured by copies); "
       "2 always copied when memory nobody needs holds it"},
      {"orphan_lease_ms", &instance_settings::orphan_lease_ms, 0, 3600000,
       "how long an instance keeps the blocks of a dead owner's request for a new owner to take over (0: freed at "
       "once)"},
      {"peer_max_blocks", &instance_settings::peer_max_blocks, 1, 1 << 30,
       "blocks (or block places) one message of a peer may name: a peer that names more is expelled from the cluster"},
      {"peer_max_open_moves", &instance_settings::peer_max_open_moves, 1, 1 << 20,
       "reservations of blocks one peer may hold at an instance at once: a peer that asks for more is expelled"},
      {"peer_max_waiting_attends", &instance_settings::peer_max_waiting_attends, 1, 1 << 24,
       "attention requests of one peer that may wait for their blocks at an instance: more are refused"},
      {"constraint_cache_mib", &instance_settings::constraint_cache_mib, 1, 1 << 20,
       "MiB a process's compiled constraints (structured outputs, tools) keep with their token masks, all together"},
      {"constraint_masks_mib", &instance_settings::constraint_masks_mib, 1, 1 << 20,
       "MiB of token masks (a bit per token per parse state) one constraint keeps, least recently used dropped"},
  };
  return table;
}

std::optional<std::vector<int>> parse_devices(const std::string& list) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::optional<int> device = gpu::cuda_device_of("cuda:" + list.substr(at, comma - at));
    if (!device) return std::nullopt;
    out.push_back(*device);
    at = comma + 1;
  }
  return out;
}

std::optional<std::string> instance_backend_name(const instance_settings& s, uint32_t id) {
  if (s.backend != "cuda" || s.devices.empty()) return s.backend;
  const auto devices = parse_devices(s.devices);
  if (!devices) return std::nullopt;
  return "cuda:" + std::to_string((*devices)[id % devices->size()]);
}

const std::vector<int_setting<gmanager_settings>>& gmanager_settings_table() {
  static const std::vector<int_setting<gmanager_settings>> table{
      {"policy_period_ms", &gmanager_settings::policy_period_ms, 1, 3600000, "how often the placement policy runs"},
      {"heartbeat_timeout_ms", &gmanager_settings::heartbeat_timeout_ms, 1, 3600000,
       "an instance silent this long gets no new requests, blocks or rooms"},
      {"dead_after_ms", &gmanager_settings::dead_after_ms, 1, 3600000,
       "an instance silent this long is declared dead: it leaves the cluster and its requests go on elsewhere"},
  };
  return table;
}

setting_read read_runtime_setting(const std::string& key, const nlohmann::json& value, batch_settings& batch,
                                  instance_settings& instance, gmanager_settings& gmanager) {
  for (setting_read r : {read_setting(batch_settings_table(), key, value, batch),
                         read_setting(instance_settings_table(), key, value, instance),
                         read_setting(gmanager_settings_table(), key, value, gmanager)})
    if (r != setting_read::not_in_table) return r;
  return setting_read::not_in_table;
}

namespace {

template <class Settings>
void add_keys(const std::vector<int_setting<Settings>>& table, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& s : table) out.emplace_back(s.key, std::string(s.help) + " (" + std::to_string(s.lo) + " to " +
                                                          std::to_string(s.hi) + ")");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> runtime_setting_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  add_keys(batch_settings_table(), out);
  add_keys(instance_settings_table(), out);
  add_keys(gmanager_settings_table(), out);
  return out;
}

}  // namespace illm::actors
