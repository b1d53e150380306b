#pragma once
// A model's weights placed on one device as the engine reads them, shared by the engines on that device:
// four instances on one GPU hold one copy of the weights, not four.

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// Rows of a packed projection that share one element type.
struct matrix_part {
  const void* data = nullptr;
  dtype type = dtype::f32;
  int rows = 0;
  bool tiled = false;  ///< stored in tiles of 8 rows (gpu/quant/tiles.hpp): read through backend::gemm_tiles
};

/// A projection [rows][cols] as up to three row ranges, each of its own type (one where the parts share a type: a
/// quantized file may hold wv in another type than wq and wk).
struct packed_matrix {
  std::array<matrix_part, 3> parts{};
  int n_parts = 0;
};

/// The weights on one device: projections that read the same input packed (one product instead of three where
/// their types agree), matrices in the types the host weights hold them in, norms and biases in fp32. On a
/// host-memory backend every tensor is the host weights' own (model_weights keeps the packed matrices' parts side
/// by side). Read only once placed, so engines on several streams share it.
class device_weights {
 public:
  /// One layer's tensors on the device.
  struct layer {
    const float* rms_att = nullptr;
    packed_matrix wqkv;             ///< [q_dim + 2 kv_dim][dim]: wq, wk, wv rows
    const float* bqkv = nullptr;    ///< [q_dim + 2 kv_dim] when the model has q, k, v biases
    const float* q_norm = nullptr;  ///< [head_dim] when the model normalises query and key heads
    const float* k_norm = nullptr;
    packed_matrix wo;  ///< [dim][q_dim]
    const float* bo = nullptr;     ///< [dim] where the output projection has a bias
    const float* sinks = nullptr;  ///< [n_heads] where the model has attention sinks
    const float* rms_ffn = nullptr;
    packed_matrix w13;  ///< [2 hidden][dim]: w1 (gate) rows, then w3 (up) rows (a dense feed-forward)
    packed_matrix w2;
    packed_matrix router;                   ///< [n_experts][dim] where the layers have experts
    const float* router_bias = nullptr;     ///< [n_experts] where the router and the experts have biases
    const float* expert_b1 = nullptr;       ///< [n_experts][hidden]: each expert's gate bias
    const float* expert_b3 = nullptr;       ///< [n_experts][hidden]: its up bias
    const float* expert_b2 = nullptr;       ///< [n_experts][dim]: its down bias
    std::vector<packed_matrix> expert_w13;  ///< per expert [2 hidden][dim]: its gate rows, then its up rows
    std::vector<packed_matrix> expert_w2;   ///< per expert [dim][hidden]
    packed_matrix shared_w13;               ///< [2 shared_hidden][dim] where the model has a shared expert
    packed_matrix shared_w2;                ///< [dim][shared_hidden]
    packed_matrix shared_gate;              ///< [1][dim]
  };

  /// Uploads (or, on a host-memory backend, points at) `weights` through `device`, which the placement keeps
  /// alive: its memory is freed through it. A backend refuses a matrix type it does not compute with.
  static result<std::shared_ptr<const device_weights>> place(std::shared_ptr<const model_weights> weights,
                                                             std::shared_ptr<backend> device);

  const model_config& config() const { return host_->config(); }
  const layer& at(int l) const { return layers_[size_t(l)]; }
  const matrix_part& embedding() const { return embedding_; }  ///< [vocab][dim]
  const float* rms_final() const { return rms_final_; }
  const packed_matrix& classifier() const { return classifier_; }  ///< [vocab][dim]
  /// Bytes this placement allocated through its backend (device memory on a GPU).
  uint64_t placed_bytes() const { return placed_bytes_; }

 private:
  device_weights() = default;
  status place_all();
  /// The fp32 vector `host` of n values on the device (on a host-memory backend, itself); null for null.
  const float* tensor(const float* host, size_t n);
  /// The parts (host matrices of `rows` rows each) as one packed matrix: on a host-memory backend the host memory
  /// itself, adjacent parts of one type merged; elsewhere uploaded, adjacent parts of one type as one buffer.
  result<packed_matrix> matrix(std::initializer_list<std::pair<const weight_matrix*, int>> parts, int cols);
  /// The feed-forward of host layer `w` into `t`: dense, or the router, each expert and the shared expert.
  status place_feed_forward(const layer_weights& w, layer& t);
  const void* keep(device_ptr buffer, const void* host, size_t bytes);

  std::shared_ptr<const model_weights> host_;
  std::shared_ptr<backend> device_;
  std::vector<device_ptr> owned_;
  std::vector<layer> layers_;
  matrix_part embedding_;
  const float* rms_final_ = nullptr;
  packed_matrix classifier_;
  uint64_t placed_bytes_ = 0;
};

/// The placements of one process by device: the first engine on a device places the weights, the others on
/// it share them while any of them holds them. Thread-safe.
class device_weights_cache {
 public:
  /// `weights` on the device named `device_name` (a backend name such as "cpu" or "cuda:1"): the placement already
  /// made there, or a new one made through a backend of its own on that device (so no engine's backend outlives
  /// its engine for the placement's sake).
  result<std::shared_ptr<const device_weights>> on(const std::shared_ptr<const model_weights>& weights,
                                                   const std::string& device_name);
  /// How many placements this cache has made (each device's first, and again after all holders let go).
  int placements() const;

 private:
  using key = std::pair<const model_weights*, std::string>;
  mutable std::mutex mutex_;
  std::map<key, std::weak_ptr<const device_weights>> placed_;  // under mutex_
  int placements_ = 0;                                          // under mutex_
};

}  // namespace illm::gpu
