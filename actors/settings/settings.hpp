#pragma once
// Settings defined once: a settings struct per component, and a table of its integer settings (JSON key, the
// flag made from it, range, meaning) from which configuration files, command-line flags and --help all take
// them. Plain C++ (no CAF, no CLI library): actors/cli/setting_flags.hpp turns a table into flags.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/logic/room_prefill.hpp"
#include "gpu/engine.hpp"
#include "gpu/grammar/constraint_cache.hpp"

namespace illm::actors {

/// One integer setting of a settings struct `Settings`.
template <class Settings>
struct int_setting {
  const char* key;        ///< its JSON key; its flag is "--" and the key with dashes for underscores
  int Settings::*field;   ///< where it lives
  int lo, hi;             ///< its range, both included
  const char* help;       ///< what it means
  const char* flag_name = nullptr;  ///< its flag without "--" when not made from the key
  /// The command-line flag: "--max-batch-tokens" for "max_batch_tokens".
  std::string flag() const {
    std::string f = std::string("--") + (flag_name ? flag_name : key);
    for (char& c : f)
      if (c == '_') c = '-';
    return f;
  }
};

/// What became of a JSON key offered to a settings table.
enum class setting_read { not_in_table, read, bad_value };

/// Reads `value` into the setting `key` of `s`, if the table has it and the value is an integer in range.
template <class Settings>
setting_read read_setting(const std::vector<int_setting<Settings>>& table, const std::string& key,
                          const nlohmann::json& value, Settings& s) {
  for (const auto& setting : table) {
    if (key != setting.key) continue;
    if (!value.is_number_integer() || value.get<int64_t>() < setting.lo || value.get<int64_t>() > setting.hi)
      return setting_read::bad_value;
    s.*setting.field = int(value.get<int64_t>());
    return setting_read::read;
  }
  return setting_read::not_in_table;
}

/// How an instance batches the steps of its engine (the embedded cluster's, an instance process's, the
/// simulator's); the table below says what each field means.
struct batch_settings {
  int max_batch_tokens = 512;
  int max_batch_seqs = 64;
  int mixed_step_tokens = 0;
  int overlap_min_tokens = gpu::engine_options{}.overlap_min_tokens;
  int room_prefill_min_chunks = default_room_prefill_min_chunks;
  int prefill_every_steps = 1;
};

/// Every batch setting: key, range, meaning.
const std::vector<int_setting<batch_settings>>& batch_settings_table();

/// The values of instance_settings::prefix_copy: a run of a shared prefix cached on another instance is read where
/// it lies, copied into the reader's cache when the performance model finds the copy cheaper, or always copied.
inline constexpr int prefix_copy_never = 0, prefix_copy_by_model = 1, prefix_copy_always = 2;

/// How an instance runs besides its batching: its pool, its threads, and the periods of its rManager (the
/// embedded cluster's, an instance process's, the service's; the simulator's in simulated time).
struct instance_settings {
  /// What its engine, KV pool and attention servers run on (--backend, actors/cli/backend_flag.hpp).
  std::string backend = "cpu";
  /// The GPUs of the cuda backend, "0,1,...": instance i runs on the (i mod n)-th; several instances may share one,
  /// each with its own pool (--devices; empty: GPU 0).
  std::string devices{};
  /// The element type of its KV pool: f32, f16 or bf16 (--kv-type); a 16-bit pool holds twice the tokens.
  std::string kv_type = "f32";
  int kv_blocks_per_instance = 256;
  /// Full KV blocks kept by content for requests with the same prefix (--prefix-cache, prefix_cache_modes): "off";
  /// "local" (each instance's cache serves the requests it runs); "cluster", the default (a request also reads the
  /// prefix another instance's cache holds, where it lies).
  std::string prefix_cache = "cluster";
  int landing_blocks = 0;  ///< 0: as many as the pool
  int staging_chunk_blocks = 8;  ///< blocks per chunk of a move out of a device pool (two chunk buffers, pinned)
  int threads_per_instance = 0;  ///< 0: the cores, shared among the instances of a process
  int heartbeat_ms = 20;
  int lease_ms = 2000;
  int attention_timeout_ms = 30000;
  int answer_timeout_ms = 5000;
  int replica_min_tokens = 4096;
  int prefix_copy = prefix_copy_by_model;  ///< prefix_copy_never, _by_model or _always (the table says what each does)
  int orphan_lease_ms = 15000;
  int peer_max_blocks = 1 << 17;         ///< blocks (or block places) one message of a peer may name
  int peer_max_open_moves = 1024;        ///< reservations one peer may hold at this instance at once
  int peer_max_waiting_attends = 4096;   ///< attends of one peer waiting for their blocks at an attention server
  int constraint_cache_mib = 512;        ///< structured outputs' compiled constraints with their masks, all together
  int constraint_masks_mib = 16;         ///< one constraint's cached token masks
};

/// The values of instance_settings::prefix_cache.
inline const std::vector<std::string> prefix_cache_modes{"off", "local", "cluster"};

/// Every instance setting: key, range, meaning.
const std::vector<int_setting<instance_settings>>& instance_settings_table();

/// The memory budget of a process's structured-output constraints, from its settings.
inline gpu::grammar::constraint_budget constraint_budget_of(const instance_settings& s) {
  return {size_t(s.constraint_cache_mib) << 20, size_t(s.constraint_masks_mib) << 20};
}

/// The GPU indexes of a --devices list ("0,1,3"); nothing when it is not a comma-separated list of indexes.
std::optional<std::vector<int>> parse_devices(const std::string& list);

/// The backend name instance `id` makes (gpu::make_backend): "cuda:N" for the cuda backend on its GPU of
/// `s.devices`, else `s.backend`; nothing when the list is malformed.
std::optional<std::string> instance_backend_name(const instance_settings& s, uint32_t id);

/// How the gManager runs (the embedded cluster's, `illm gmanager`'s, the simulator's).
struct gmanager_settings {
  int policy_period_ms = 50;
  int heartbeat_timeout_ms = 2000;
  int dead_after_ms = 10000;
};

/// Every gManager setting: key, range, meaning.
const std::vector<int_setting<gmanager_settings>>& gmanager_settings_table();

/// A process's control-plane security: its TLS files (all three, or none), and whether plain TCP may listen
/// beyond loopback.
struct control_security {
  std::string ca;         ///< PEM file of the CA every peer's certificate must be signed by
  std::string cert;       ///< PEM certificate (or chain) this process presents
  std::string key;        ///< PEM private key of `cert` (unencrypted)
  bool insecure = false;  ///< plain TCP may listen on addresses other than loopback
  bool tls() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

/// A JSON key read into whichever of the tables has it (batch, instance, gManager settings).
setting_read read_runtime_setting(const std::string& key, const nlohmann::json& value, batch_settings& batch,
                                  instance_settings& instance, gmanager_settings& gmanager);

/// Every key of the three tables with its meaning and range, for --help and error messages.
std::vector<std::pair<std::string, std::string>> runtime_setting_keys();

}  // namespace illm::actors
