#pragma once
// A model's weights placed on one device as the engine reads them, shared by the engines on that device:
// four instances on one GPU hold one copy of the weights, not four.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// The weights on one device: projections that read the same input packed into one matrix (one product
/// instead of three), matrices in weight_type, norms and biases in fp32. On a host-memory backend the fp32
/// tensors are the host weights themselves (model_weights keeps the packed matrices' parts side by side). Read only once placed, so engines on several streams share it.
class device_weights {
 public:
  /// One layer's tensors on the device.
  struct layer {
    const float* rms_att = nullptr;
    const void* wqkv = nullptr;  ///< [q_dim + 2 kv_dim][dim]: wq, wk, wv rows (weight_type)
    const float* bqkv = nullptr;    ///< [q_dim + 2 kv_dim] when the model has q, k, v biases
    const float* q_norm = nullptr;  ///< [head_dim] when the model normalises query and key heads
    const float* k_norm = nullptr;
    const void* wo = nullptr;       ///< [dim][q_dim]
    const float* rms_ffn = nullptr;
    const void* w13 = nullptr;  ///< [2 hidden][dim]: w1 (gate) rows, then w3 (up) rows
    const void* w2 = nullptr;
  };

  /// Uploads (or packs, on a host-memory backend) `weights` through `device`, which the placement keeps
  /// alive: its memory is freed through it.
  static result<std::shared_ptr<const device_weights>> place(std::shared_ptr<const model_weights> weights,
                                                             std::shared_ptr<backend> device, dtype weight_type);

  const model_config& config() const { return host_->config(); }
  dtype weight_type() const { return weight_type_; }
  const layer& at(int l) const { return layers_[size_t(l)]; }
  const float* embedding() const { return embedding_; }  ///< [vocab][dim], fp32
  const float* rms_final() const { return rms_final_; }
  const void* classifier() const { return classifier_; }  ///< [vocab][dim], weight_type
  /// Bytes this placement allocated through its backend (device memory on a GPU).
  uint64_t placed_bytes() const { return placed_bytes_; }

 private:
  device_weights() = default;
  status place_all();
  const float* tensor(const float* host, size_t n);
  /// A matrix in weight_type packed from `parts` (host fp32, in order): the host memory itself where it is
  /// fp32 on a host-memory backend and the parts lie one after another.
  const void* matrix(std::initializer_list<std::pair<const float*, size_t>> parts);
  const void* keep(device_ptr buffer, const void* host, size_t bytes);

  std::shared_ptr<const model_weights> host_;
  std::shared_ptr<backend> device_;
  dtype weight_type_ = dtype::f32;
  std::vector<device_ptr> owned_;
  std::vector<layer> layers_;
  const float* embedding_ = nullptr;
  const float* rms_final_ = nullptr;
  const void* classifier_ = nullptr;
  uint64_t placed_bytes_ = 0;
};

/// The placements of one process by device: the first engine on a device places the weights, the others on
/// it share them while any of them holds them. Thread-safe.
class device_weights_cache {
 public:
  /// `weights` on the device named `device_name` (a backend name such as "cpu" or "cuda:1") in `weight_type`:
  /// the placement already made there, or a new one made through a backend of its own on that device (so no
  /// engine's backend outlives its engine for the placement's sake).
  result<std::shared_ptr<const device_weights>> on(const std::shared_ptr<const model_weights>& weights,
                                                   const std::string& device_name, dtype weight_type);
  /// How many placements this cache has made (each device's first, and again after all holders let go).
  int placements() const;

 private:
  using key = std::tuple<const model_weights*, std::string, dtype>;
  mutable std::mutex mutex_;
  std::map<key, std::weak_ptr<const device_weights>> placed_;  // under mutex_
  int placements_ = 0;                                          // under mutex_
};

}  // namespace illm::gpu
