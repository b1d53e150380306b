#pragma once
// The angles of rotary position embedding: pair i of a head turns by pos * inverse(i) radians, with
// inverse(i) = theta^(-2i / head_dim), rescaled for long context as the model asks: "linear" divides every
// frequency by the factor; "llama3" (Llama 3.1 and later) divides the low frequencies by it, keeps the high
// ones, and blends the band between; "per_pair" divides pair i's by a factor of its own (how GGUF files store
// Llama 3.1's, as the tensor rope_freqs); "yarn" (YaRN, gpt-oss) keeps the pairs that turn more than beta_fast
// times over the original context, divides those turning fewer than beta_slow times by the factor, ramps linearly
// between, and scales the rotation by an attention factor (0.1 ln(factor) + 1), which multiplies every query and
// key. Shared by the cpu and CUDA kernels (computed in fp64 on both).

#include <math.h>

#include "gpu/host_device.hpp"

namespace illm::gpu {

/// How a model's RoPE frequencies are scaled.
enum class rope_scaling_kind : int { none, linear, llama3, per_pair, yarn };

/// The frequencies of a model's RoPE (trivially copyable: a kernel argument).
struct rope_frequencies {
  float theta = 10000.0f;
  rope_scaling_kind scaling = rope_scaling_kind::none;
  float factor = 1.0f;            ///< linear and llama3: how much longer the context is
  float low_freq_factor = 1.0f;   ///< llama3: wavelengths above original / low_freq_factor are divided by factor
  float high_freq_factor = 4.0f;  ///< llama3: wavelengths below original / high_freq_factor are kept
  int original_positions = 8192;  ///< llama3 and yarn: the context the model was trained on first
  float beta_fast = 32.0f;        ///< yarn: pairs turning more often than this over the original context are kept
  float beta_slow = 1.0f;         ///< yarn: pairs turning less often are divided by factor
  bool truncate = true;           ///< yarn: the ramp's ends rounded out to whole pairs (gpt-oss: false)
  static constexpr int max_pairs = 256;
  float pair_divisors[max_pairs] = {};  ///< per_pair: pair i's frequency is divided by pair_divisors[i]

  /// Radians per position of pair `pair` of a head of `head_dim`.
  ILLM_HOST_DEVICE double inverse(int pair, int head_dim) const {
    const double base = pow(double(theta), -2.0 * pair / head_dim);
    if (scaling == rope_scaling_kind::linear) return base / factor;
    if (scaling == rope_scaling_kind::per_pair) return base / double(pair_divisors[pair]);
    if (scaling == rope_scaling_kind::yarn) return yarn_inverse(base, pair, head_dim);
    if (scaling != rope_scaling_kind::llama3) return base;
    const double wavelength = 2.0 * 3.14159265358979323846 / base;
    const double original = double(original_positions);
    if (wavelength < original / high_freq_factor) return base;
    if (wavelength > original / low_freq_factor) return base / factor;
    const double smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0 - smooth) * base / factor + smooth * base;
  }

  /// What the rotation is scaled by: YaRN's attention factor, else 1.
  ILLM_HOST_DEVICE double magnitude() const {
    return scaling == rope_scaling_kind::yarn && factor > 1.0f ? 0.1 * log(double(factor)) + 1.0 : 1.0;
  }

 private:
  /// The pair (fractional) that turns `turns` times over the original context.
  ILLM_HOST_DEVICE double yarn_pair(double turns, int head_dim) const {
    const double pi = 3.14159265358979323846;
    return head_dim * log(double(original_positions) / (turns * 2.0 * pi)) / (2.0 * log(double(theta)));
  }

  ILLM_HOST_DEVICE double yarn_inverse(double base, int pair, int head_dim) const {
    double low = yarn_pair(beta_fast, head_dim), high = yarn_pair(beta_slow, head_dim);
    if (truncate) low = floor(low), high = ceil(high);
    low = fmax(low, 0.0);
    high = fmin(high, double(head_dim - 1));
    if (high == low) high += 0.001;
    const double ramp = fmin(fmax((pair - low) / (high - low), 0.0), 1.0);  // 0: kept, 1: divided by factor
    return base / factor * ramp + base * (1.0 - ramp);
  }
};

}  // namespace illm::gpu
