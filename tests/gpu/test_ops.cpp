// The cpu kernels against plain fp64 arithmetic: products (decode and batched shapes), RMSNorm,
// RoPE at positions far beyond training, SwiGLU, and the sampler's determinism and distribution.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/sampler.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

std::vector<float> uniform_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gemm matches fp64 for decode and batch shapes") {
    gpu::backend& device = test::cpu_device();
    for (int m : {1, 2, 3, 4, 5, 17, 33, 48, 64, 65, 100, 128, 129}) {
      for (auto [k, n] : {std::pair{37, 29}, std::pair{288, 768}, std::pair{130, 3}, std::pair{768, 40}}) {
        const auto x = uniform_vector(size_t(m) * k, 1 + m), w = uniform_vector(size_t(n) * k, 2 + n);
        for (bool accumulate : {false, true}) {
          std::vector<float> y(size_t(m) * n, 0.5f);
          REQUIRE(device.gemm(x.data(), k, m, k, w.data(), gpu::dtype::f32, k, n, y.data(), n, accumulate).is_ok());
          double worst = 0;
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              double ref = accumulate ? 0.5 : 0.0;
              for (int d = 0; d < k; ++d) ref += double(x[size_t(i) * k + d]) * w[size_t(j) * k + d];
              worst = std::max(worst, std::abs(ref - y[size_t(i) * n + j]));
            }
          CHECK_MESSAGE(worst < 1e-4, "m=", m, " k=", k, " n=", n, " error ", worst);
        }
      }
    }
  }

  TEST_CASE("rmsnorm and silu_mul match fp64") {
    gpu::backend& device = test::cpu_device();
    const int m = 3, n = 291;
    const auto x = uniform_vector(size_t(m) * n, 5, 3.0f), w = uniform_vector(n, 6);
    std::vector<float> y(x.size());
    REQUIRE(device.rmsnorm(x.data(), n, w.data(), m, n, 1e-5f, y.data(), n).is_ok());
    for (int i = 0; i < m; ++i) {
      double ss = 0;
      for (int d = 0; d < n; ++d) ss += double(x[size_t(i) * n + d]) * x[size_t(i) * n + d];
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int d = 0; d < n; ++d)
        CHECK(std::abs(y[size_t(i) * n + d] - x[size_t(i) * n + d] * inv * w[d]) < 1e-5);
    }
    const auto up = uniform_vector(size_t(m) * n, 7, 2.0f);
    REQUIRE(device.silu_mul(x.data(), up.data(), n, m, n, y.data(), n, {}).is_ok());
    for (size_t i = 0; i < x.size(); ++i) {
      const double g = x[i], ref = g / (1.0 + std::exp(-g)) * up[i];
      CHECK(std::abs(y[i] - ref) < 1e-5 * std::max(1.0, std::abs(ref)));
    }
    // gpt-oss's: the gate clamped above at 7, the up value to [-7, 7] and shifted by 1, the sigmoid's slope 1.702.
    const auto wide_gate = uniform_vector(size_t(m) * n, 8, 12.0f), wide_up = uniform_vector(size_t(m) * n, 9, 12.0f);
    REQUIRE(device.silu_mul(wide_gate.data(), wide_up.data(), n, m, n, y.data(), n, {1.702f, 7.0f, 1.0f}).is_ok());
    int clamped = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double g = std::min(double(wide_gate[i]), 7.0), u = std::clamp(double(wide_up[i]), -7.0, 7.0);
      const double ref = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
      clamped += std::abs(wide_up[i]) > 7.0f;
      CHECK(std::abs(y[i] - ref) < 1e-5 * std::max(1.0, std::abs(ref)));
    }
    CHECK(clamped > 0);
  }

  TEST_CASE("rope is exact far beyond the training context") {
    gpu::backend& device = test::cpu_device();
    const int hd = 64, heads = 2;
    const std::vector<int32_t> pos = {0, 255, 100000, 2000000000};
    std::vector<float> table(pos.size() * hd);
    REQUIRE(device.rope_table(pos.data(), int(pos.size()), hd, gpu::rope_frequencies{}, table.data()).is_ok());
    const auto x0 = uniform_vector(pos.size() * heads * hd, 9);
    auto x = x0;
    REQUIRE(device.rope(x.data(), heads * hd, int(pos.size()), heads, hd, table.data()).is_ok());
    for (size_t t = 0; t < pos.size(); ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const double angle = double(pos[t]) * std::pow(10000.0, -2.0 * i / hd);
          const size_t at = (t * heads + h) * hd + 2 * i;
          const double a = x0[at], b = x0[at + 1];
          CHECK(std::abs(x[at] - (a * std::cos(angle) - b * std::sin(angle))) < 1e-6);
          CHECK(std::abs(x[at + 1] - (a * std::sin(angle) + b * std::cos(angle))) < 1e-6);
        }
  }

  TEST_CASE("rope scores depend only on the distance between positions") {
    gpu::backend& device = test::cpu_device();
    const int hd = 48;
    const auto q = uniform_vector(hd, 3), k = uniform_vector(hd, 4);
    auto score = [&](int32_t pq, int32_t pk) {
      std::vector<int32_t> pos = {pq, pk};
      std::vector<float> table(2 * hd), qk(2 * hd);
      std::copy(q.begin(), q.end(), qk.begin());
      std::copy(k.begin(), k.end(), qk.begin() + hd);
      REQUIRE(device.rope_table(pos.data(), 2, hd, gpu::rope_frequencies{}, table.data()).is_ok());
      REQUIRE(device.rope(qk.data(), hd, 2, 1, hd, table.data()).is_ok());
      double s = 0;
      for (int d = 0; d < hd; ++d) s += double(qk[d]) * qk[hd + d];
      return s;
    };
    CHECK(std::abs(score(7, 2) - score(1000007, 1000002)) < 1e-5);
    CHECK(std::abs(score(300, 0) - score(5000300, 5000000)) < 1e-5);
  }

  TEST_CASE("greedy sampling is argmax and seeded sampling repeats") {
    std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 2.0f};
    uint64_t rng = 1;
    CHECK(gpu::sample_token(logits.data(), 5, {0.0f, 1.0f}, rng) == 1);  // first of the equal maxima
    CHECK(rng == 1);                                                     // greedy draws nothing
    std::vector<int32_t> a, b;
    uint64_t ra = 42, rb = 42;
    for (int i = 0; i < 50; ++i) {
      a.push_back(gpu::sample_token(logits.data(), 5, {1.0f, 0.9f}, ra));
      b.push_back(gpu::sample_token(logits.data(), 5, {1.0f, 0.9f}, rb));
    }
    CHECK(a == b);
    uint64_t rc = 7;
    for (int i = 0; i < 20; ++i) {  // top_p this small keeps only the most likely token
      const int32_t t = gpu::sample_token(logits.data(), 5, {1.0f, 0.01f}, rc);
      CHECK((t == 1 || t == 4));
    }
  }

  TEST_CASE("temperature sampling follows the softmax") {
    const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
    const float temperature = 0.7f;
    double total = 0;
    std::vector<double> p;
    for (float l : logits) total += std::exp(l / temperature);
    for (float l : logits) p.push_back(std::exp(l / temperature) / total);
    std::map<int32_t, int> counts;
    uint64_t rng = 2024;
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) ++counts[gpu::sample_token(logits.data(), 4, {temperature, 1.0f}, rng)];
    for (int i = 0; i < 4; ++i) CHECK(std::abs(counts[i] / double(draws) - p[i]) < 0.02);
  }

  TEST_CASE("reference and fast cpu modes agree") {
    gpu::cpu::cpu_backend fast(2, gpu::cpu::cpu_mode::fast), reference(1, gpu::cpu::cpu_mode::reference);
    const int m = 9, k = 77, n = 45;
    const auto x = uniform_vector(size_t(m) * k, 21), w = uniform_vector(size_t(n) * k, 22);
    std::vector<float> y1(size_t(m) * n), y2(size_t(m) * n);
    REQUIRE(fast.gemm(x.data(), k, m, k, w.data(), gpu::dtype::f32, k, n, y1.data(), n, false).is_ok());
    REQUIRE(reference.gemm(x.data(), k, m, k, w.data(), gpu::dtype::f32, k, n, y2.data(), n, false).is_ok());
    for (size_t i = 0; i < y1.size(); ++i) CHECK(std::abs(y1[i] - y2[i]) < 1e-4);
    CHECK(reference.name() == "cpu-reference");
  }
}
