#pragma once
// Measured placement profiles kept on disk, so a server measures its model on its machine once: the file is
// named by a hash of what the measurement depends on (the model's files, the weight and KV types, the device,
// the thread count), under $ILLM_CACHE/profiles (default ~/.cache/illm/profiles).

#include <optional>
#include <string>

#include "actors/placement/perf_model.hpp"

namespace illm::actors::placement {

/// What a measured profile depends on.
struct profile_key {
  std::string model_path;  ///< the model as named on the command line (a name, a file or a folder)
  std::string weights;     ///< the weight types as loaded (model_weights::describe_types())
  std::string kv_type;
  std::string device;      ///< the backend's description
  int threads = 0;
};

/// The cache file of `key`: its name hashes the key with the model files' sizes and modification times (a
/// changed file gets a new name).
std::string profile_cache_path(const profile_key& key);

/// The profile cached at `path`; none when there is none or it does not parse (the caller measures again).
std::optional<profile> cached_profile(const std::string& path);

/// Writes `p` to `path` (through a file beside it, renamed into place); false when it cannot.
bool store_profile(const std::string& path, const profile& p);

}  // namespace illm::actors::placement
