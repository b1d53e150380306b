#pragma once
// The configuration of `illm serve`: every setting has a flag and a key in a JSON file; flags given
// on the command line override the file. An unknown key or a value of the wrong type is an error
// that names it.

#include <cstdint>
#include <string>

#include "actors/frontend/service.hpp"
#include "actors/settings/settings.hpp"

namespace illm::actors::frontend {

/// Everything `illm serve` needs.
struct serve_config {
  std::string model = "stories15M";
  std::string served_model_name;  ///< the id clients ask for; empty: the model folder's or file's name
  std::string chat_template;      ///< a Jinja file replacing the model's chat template; empty: the model's
  std::string weight_type;        ///< every matrix converted to this type at load (f16, q8_0, ...); empty: as stored
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string faults;  ///< the fault plan to inject (actors/faults/fault_plan.hpp); empty: none
  std::string gmanager;  ///< HOST:PORT of a cluster of processes (illm gmanager); empty: an embedded cluster
  control_security tls;  ///< how it reaches the cluster of processes (TLS files)
  int instances = 2;
  /// Every instance's pool (larger than elsewhere: a service holds many requests), threads and periods.
  instance_settings instance{.kv_blocks_per_instance = 1024};
  batch_settings batch;        ///< how every instance batches its steps
  gmanager_settings embedded_gmanager;  ///< the embedded gManager's periods
  std::string policy = "greedy";  ///< the embedded gManager's placement: greedy (the performance model) or simple
  std::string profile;  ///< the greedy policy's profile (illm profile --out); empty: measured at start
  int shutdown_grace_s = 10;
  std::string metrics_prefix = "illm:";  ///< or "illm_"
  service_options service;
};

/// Reads a JSON configuration file over the defaults.
gpu::result<serve_config> load_serve_config(const std::string& path);

/// The keys a configuration file may hold, with their meaning (for --help and the README).
std::string serve_config_keys();

}  // namespace illm::actors::frontend
