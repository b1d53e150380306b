#pragma once
// The links between simulated instances (plain C++): NVLink between the GPUs of a node, the network (a
// NIC per GPU) between nodes; instances fill the nodes in id order. What crosses them: a step's remote
// attention (its queries to each holder, their partials back) and the KV blocks that moves copy. An
// instance of several GPUs sends over all their links at once.

#include <cstdint>

#include "gpu/model_config.hpp"

namespace illm::actors::sim {

/// Bandwidths of the links and where the instances sit.
struct link_model {
  double node_bytes_per_s = 0;     ///< NVLink, one direction, per GPU (0: links take no time)
  double network_bytes_per_s = 0;  ///< a GPU's NIC, one direction
  int gpus_per_node = 8;
  int gpus_per_instance = 1;

  /// The node instance a sits on.
  int64_t node_of(uint32_t a) const { return int64_t(a) * gpus_per_instance / (gpus_per_node > 0 ? gpus_per_node : 1); }
  /// Whether instances a and b sit on one node.
  bool same_node(uint32_t a, uint32_t b) const { return node_of(a) == node_of(b); }
  /// Seconds `bytes` take from instance a to b (0 when the links are not modelled).
  double seconds(uint32_t a, uint32_t b, double bytes) const {
    const double per_gpu = same_node(a, b) ? node_bytes_per_s : network_bytes_per_s;
    return per_gpu > 0 ? bytes / (per_gpu * gpus_per_instance) : 0.0;
  }
};

/// Bytes one query row and its partial take on the wire for a model: fp16 queries and MA, fp32 m and e.
struct attention_row_bytes {
  double query = 0, partial = 0;
  static attention_row_bytes of(const gpu::model_config& c) {
    return {2.0 * c.n_heads * c.head_dim(), c.n_heads * (2.0 * c.head_dim() + 8.0)};
  }
};

}  // namespace illm::actors::sim
