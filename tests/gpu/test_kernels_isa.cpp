// The cpu product kernels (f32, and the integer products of block-type weights) compiled for one SIMD level (ILLM_TEST_ISA, the -march this executable was built with,
// whatever the rest of the build targets), against fp64: so that the AVX2 and SSE paths are checked on machines
// whose native build takes AVX-512, and the other way round. Exits 77 (CTest's skip) where the processor lacks
// the level. Every tile shape is reached: m = 1..4 (gemv), 5..16 (one or two vectors), 17..128 (groups of rows),
// and weight-row counts that leave remainders after whole tiles and panels.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu/cpu/kernels.hpp"
#include "gpu/cpu/tiled_gemm.hpp"
#include "gpu/cpu/typed_gemm.hpp"
#include "gpu/quant/blocks.hpp"
#include "gpu/quant/tiles.hpp"

using namespace illm::gpu::cpu;
namespace gpu = illm::gpu;

namespace {

std::vector<float> uniform_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  std::generate(v.begin(), v.end(), [&] { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng); });
  return v;
}

/// The largest difference of y from x * w^T (+ 0.5 where accumulated) over columns [j0, j1), in fp64.
double worst_error(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& y, int m,
                   int k, int n, int j0, int j1, bool accumulate) {
  double worst = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double want = accumulate || j < j0 || j >= j1 ? 0.5 : 0.0;
      if (j >= j0 && j < j1)
        for (int d = 0; d < k; ++d) want += double(x[size_t(i) * k + d]) * w[size_t(j) * k + d];
      worst = std::max(worst, std::abs(want - y[size_t(i) * n + j]));
    }
  return worst;
}

struct shape {
  int k, n, j0, j1;
};
constexpr shape shapes[] = {{37, 29, 0, 29}, {288, 40, 3, 37}, {130, 3, 0, 3}, {768, 19, 1, 19}};

}  // namespace

TEST_CASE("gemv matches fp64 at 1 to 4 rows") {
  for (int m = 1; m <= 4; ++m)
    for (const shape& s : shapes)
      for (bool accumulate : {false, true}) {
        const auto x = uniform_vector(size_t(m) * s.k, 1 + m), w = uniform_vector(size_t(s.n) * s.k, 2 + s.n);
        std::vector<float> y(size_t(m) * s.n, 0.5f);
        gemv(x.data(), s.k, m, s.k, w.data(), s.k, s.j0, s.j1, y.data(), s.n, accumulate);
        const double worst = worst_error(x, w, y, m, s.k, s.n, s.j0, s.j1, accumulate);
        CHECK_MESSAGE(worst < 1e-4, ILLM_TEST_ISA, " m=", m, " k=", s.k, " n=", s.n, " error ", worst);
      }
}

TEST_CASE("the skinny product matches fp64 at 1 to 130 rows") {
  for (int m : {1, 4, 5, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 63, 64, 65, 96, 100, 127, 128}) {
    for (const shape& s : shapes)
      for (bool accumulate : {false, true}) {
        const auto x = uniform_vector(size_t(m) * s.k, 1 + m), w = uniform_vector(size_t(s.n) * s.k, 2 + s.n);
        const int mp = (m + 15) / 16 * 16;
        std::vector<float> xt(size_t(s.k) * mp, -1.0f), y(size_t(m) * s.n, 0.5f);
        transpose_rows(x.data(), s.k, m, s.k, xt.data(), mp);
        gemm_skinny(xt.data(), mp, m, s.k, w.data(), s.k, s.j0, s.j1, y.data(), s.n, accumulate);
        const double worst = worst_error(x, w, y, m, s.k, s.n, s.j0, s.j1, accumulate);
        CHECK_MESSAGE(worst < 1e-4, ILLM_TEST_ISA, " m=", m, " k=", s.k, " n=", s.n, " error ", worst);
      }
  }
}

TEST_CASE("products with f16 and bf16 weights match fp64 over the weights widened, at 1 to 130 rows") {
  for (gpu::dtype type : {gpu::dtype::f16, gpu::dtype::bf16})
    for (const shape& s : shapes) {
      std::vector<uint8_t> w(gpu::row_bytes(type, s.k) * s.n);
      gpu::quantize(type, uniform_vector(size_t(s.n) * s.k, 5 + s.k).data(), size_t(s.n) * s.k, w.data());
      std::vector<float> wf(size_t(s.n) * s.k);
      gpu::dequantize(type, w.data(), size_t(s.n) * s.k, wf.data());
      for (int m : {1, 2, 3, 4, 5, 7, 8, 16, 17, 64, 65, 130})
        for (bool accumulate : {false, true}) {
          const auto x = uniform_vector(size_t(m) * s.k, 13 + m);
          std::vector<float> y(size_t(m) * s.n, 0.5f);
          gemm_halves(x.data(), s.k, m, s.k, type, w.data(), gpu::row_bytes(type, s.k), s.j0, s.j1, y.data(), s.n,
                      accumulate);
          const double worst = worst_error(x, wf, y, m, s.k, s.n, s.j0, s.j1, accumulate);
          CHECK_MESSAGE(worst < 1e-4, ILLM_TEST_ISA, " ", std::string(gpu::to_string(type)), " m=", m, " k=", s.k,
                        " error ", worst);
        }
    }
}

TEST_CASE("products with block-type weights match fp64 over the values they read, at 1 to 65 rows") {
  const int k = 512, n = 70, j0 = 3, j1 = 69;  // two panels of 32 weight rows and a remainder; an odd start
  for (gpu::dtype type : {gpu::dtype::q8_0, gpu::dtype::q5_0, gpu::dtype::q4_k, gpu::dtype::q6_k, gpu::dtype::mxfp4}) {
    std::vector<uint8_t> w(gpu::row_bytes(type, k) * n);
    gpu::quantize(type, uniform_vector(size_t(n) * k, 7).data(), size_t(n) * k, w.data());
    std::vector<float> wf(size_t(n) * k), xf(k);
    gpu::dequantize(type, w.data(), size_t(n) * k, wf.data());
    for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 16, 17, 18, 19, 64, 65}) {
      const auto x = uniform_vector(size_t(m) * k, 11 + m);
      quantized_rows xq;
      xq.resize(m, k, int(gpu::block_elements(type)));
      xq.quantize(x.data(), k, 0, m);
      std::vector<float> y(size_t(m) * n, 0.5f);
      gemm_blocks(xq, m, type, w.data(), gpu::row_bytes(type, k), j0, j1, y.data(), n, true);
      double worst = 0;
      for (int i = 0; i < m; ++i) {
        xq.dequantize(i, xf.data());
        for (int j = 0; j < n; ++j) {
          double want = 0.5;
          if (j >= j0 && j < j1)
            for (int d = 0; d < k; ++d) want += double(xf[size_t(d)]) * wf[size_t(j) * k + d];
          worst = std::max(worst, std::abs(want - y[size_t(i) * n + j]));
        }
      }
      CHECK_MESSAGE(worst < 2e-3, ILLM_TEST_ISA, " ", std::string(gpu::to_string(type)), " m=", m, " error ", worst);
    }
  }
}

TEST_CASE("products with weights stored in tiles equal the file layout's, at 1 to 512 rows") {
  const int k = 512, n = 72;  // nine tiles: two panels of four and one more
  for (gpu::dtype type : {gpu::dtype::q8_0, gpu::dtype::q4_k}) {
    const size_t bytes = gpu::row_bytes(type, k);
    std::vector<uint8_t> w(bytes * n);
    gpu::quantize(type, uniform_vector(size_t(n) * k, 9).data(), size_t(n) * k, w.data());
    std::vector<uint8_t> tiled = w, row(bytes);
    gpu::tile_rows_in_place(type, tiled.data(), n, k);
    CHECK(tiled != w);
    for (int j = 0; j < n; ++j) {  // every byte back where the file had it
      gpu::untile_row(type, tiled.data(), k, size_t(j), row.data());
      CHECK_MESSAGE(std::equal(row.begin(), row.end(), w.begin() + std::ptrdiff_t(j * bytes)), "row ", j);
    }
    for (int m : {1, 2, 3, 4, 5, 8, 16, 17, 19, 64, 65, 130, 512}) {
      const auto x = uniform_vector(size_t(m) * k, 21 + m);
      quantized_rows xq;
      xq.resize(m, k, int(gpu::block_elements(type)));
      xq.quantize(x.data(), k, 0, m);
      std::vector<float> want(size_t(m) * n, 0.5f), got = want;
      // The file layout's kernels (rows one at a time) and the tiles' (tiles 1 .. 8 of 9, so that neither end
      // is assumed), both accumulating.
      gemm_blocks(xq, m, type, w.data(), bytes, 8, n - 8, want.data(), n, true);
      gemm_stored_tiles(xq, m, type, tiled.data(), bytes, 1, n / 8 - 1, got.data(), n, true);
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(want[i] - got[i])));
      CHECK_MESSAGE(worst < 1e-3, ILLM_TEST_ISA, " ", std::string(gpu::to_string(type)), " m=", m, " error ", worst);
    }
  }
}

int main(int argc, char** argv) {
  // isa_gate.cpp has exited 77 already where the processor lacks the level.
  doctest::Context context(argc, argv);
  return context.run();
}
