#pragma once
// The gate of a gated feed-forward (SwiGLU): out = g * sigmoid(alpha * g) * (u + up_shift) for a gate value g and
// an up value u. Plain SwiGLU has alpha 1 and nothing else; gpt-oss's has alpha 1.702, clamps g from above and u on
// both sides at a limit (7), and adds 1 to u. Shared by the cpu and CUDA kernels.

#include <math.h>

#include "gpu/host_device.hpp"

namespace illm::gpu {

/// The constants of a feed-forward's gate (trivially copyable: a kernel argument).
struct gated_activation {
  float alpha = 1.0f;     ///< the sigmoid's slope
  float limit = 0.0f;     ///< g clamped to at most limit, u to [-limit, limit]; 0: no clamping
  float up_shift = 0.0f;  ///< added to u after clamping

  /// Whether this is plain SwiGLU (g * sigmoid(g) * u).
  ILLM_HOST_DEVICE bool plain() const { return alpha == 1.0f && limit == 0.0f && up_shift == 0.0f; }

  /// The gate of one pair of values.
  ILLM_HOST_DEVICE float operator()(float g, float u) const {
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    return g / (1.0f + expf(-alpha * g)) * (u + up_shift);
  }
};

}  // namespace illm::gpu
