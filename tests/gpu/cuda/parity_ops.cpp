// Every op of the cuda backend against the cpu reference (plain loops) on seeded random inputs of odd
// sizes, compared by NMSE with a per-op tolerance, as ggml's test-backend-ops does for its backends.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gpu/half.hpp"
#include "gpu/quant/blocks.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/kv_staging.hpp"
#include "gpu/sampler.hpp"
#include "tests/gpu/cuda/runner.hpp"

using namespace illm;
using gpu::dtype;
using test::device;
using test::device_array;
using test::nmse;
using test::random_floats;
using test::reference;

namespace {

constexpr dtype all_types[] = {dtype::f32, dtype::f16, dtype::bf16};

/// Per-op tolerances (NMSE). The reference sees the same rounded inputs as the device, so only the
/// order of fp32 operations differs.
constexpr double exact_ops = 1e-12;  // elementwise ops, no accumulation
constexpr double products = 1e-9;    // sums of hundreds of terms
constexpr double attention = 1e-9;   // softmax sums over up to tens of thousands of keys

/// n floats converted to `type`, as raw bytes.
std::vector<uint8_t> to_type(const std::vector<float>& v, dtype type) {
  std::vector<uint8_t> out(v.size() * gpu::dtype_bytes(type));
  gpu::convert_floats(v.data(), v.size(), type, out.data());
  return out;
}

std::vector<float> rounded(std::vector<float> v, dtype type) {
  for (float& x : v) x = gpu::round_to(type, x);
  return v;
}

// ---- Products --------------------------------------------------------------------------------------

void check_gemm(dtype w_type, int m, int k, int n, size_t ldx, bool accumulate, uint64_t seed) {
  const size_t ldw = size_t(k) + 1, ldy = size_t(n) + 2;
  const auto x = random_floats(size_t(m) * ldx, seed), w = random_floats(size_t(n) * ldw, seed + 1),
             y0 = random_floats(size_t(m) * ldy, seed + 2);
  // The device rounds x to the weights' type before a 16-bit product; the reference gets both rounded.
  auto y_ref = y0;
  ILLM_REQUIRE_OK(reference().gemm(rounded(x, w_type).data(), ldx, m, k, rounded(w, w_type).data(), dtype::f32, ldw,
                                   n, y_ref.data(), ldy, accumulate));
  device_array<float> dx(device(), x), dy(device(), y0);
  device_array<uint8_t> dw(device(), to_type(w, w_type));
  ILLM_REQUIRE_OK(device().gemm(dx.get(), ldx, m, k, dw.get(), w_type, ldw, n, dy.get(), ldy, accumulate));
  // Padding columns between rows are not part of the product: the device must leave them alone.
  const double error = nmse(dy.read(), y_ref);
  ILLM_CHECK(error <= products, "{} weights, m {} k {} n {} ldx {} accumulate {}: nmse {}", gpu::to_string(w_type), m,
             k, n, ldx, accumulate, error);
}

ILLM_CASE("ops", "gemm with f32, f16 and bf16 weights") {
  uint64_t seed = 1;
  for (dtype type : all_types)
    for (int m : {1, 3, 17, 70})
      for (auto [k, n] : {std::pair{37, 29}, std::pair{288, 768}, std::pair{130, 1001}})
        for (bool accumulate : {false, true}) check_gemm(type, m, k, n, size_t(k) + (m % 2 ? 3 : 0), accumulate, seed++);
}

// ---- Elementwise and row ops -------------------------------------------------------------------------

ILLM_CASE("ops", "rmsnorm, also in place") {
  const int m = 5, n = 291;
  const size_t ldx = 300, ldy = 295;
  const auto x = random_floats(size_t(m) * ldx, 11, 3.0f), w = random_floats(size_t(n), 12);
  std::vector<float> y_ref(size_t(m) * ldy, 0.0f), in_place_ref = x;
  ILLM_REQUIRE_OK(reference().rmsnorm(x.data(), ldx, w.data(), m, n, 1e-5f, y_ref.data(), ldy));
  ILLM_REQUIRE_OK(reference().rmsnorm(in_place_ref.data(), ldx, w.data(), m, n, 1e-5f, in_place_ref.data(), ldx));
  device_array<float> dx(device(), x), dw(device(), w), dy(device(), std::vector<float>(size_t(m) * ldy, 0.0f));
  ILLM_REQUIRE_OK(device().rmsnorm(dx.get(), ldx, dw.get(), m, n, 1e-5f, dy.get(), ldy));
  ILLM_CHECK(nmse(dy.read(), y_ref) <= exact_ops, "rmsnorm nmse {}", nmse(dy.read(), y_ref));
  ILLM_REQUIRE_OK(device().rmsnorm(dx.get(), ldx, dw.get(), m, n, 1e-5f, dx.get(), ldx));
  ILLM_CHECK(nmse(dx.read(), in_place_ref) <= exact_ops, "in place nmse {}", nmse(dx.read(), in_place_ref));
}

ILLM_CASE("ops", "head_rmsnorm and add_bias") {
  const int m = 4, heads = 3, hd = 50;
  const size_t ld = size_t(heads) * hd + 7;
  auto x_ref = random_floats(size_t(m) * ld, 13, 3.0f);
  const auto w = random_floats(size_t(hd), 14), bias = random_floats(ld - 2, 15);
  device_array<float> dx(device(), x_ref), dw(device(), w), dbias(device(), bias);
  ILLM_REQUIRE_OK(reference().head_rmsnorm(x_ref.data(), ld, m, heads, hd, w.data(), 1e-6f));
  ILLM_REQUIRE_OK(device().head_rmsnorm(dx.get(), ld, m, heads, hd, dw.get(), 1e-6f));
  ILLM_CHECK(nmse(dx.read(), x_ref) <= exact_ops, "head_rmsnorm nmse {}", nmse(dx.read(), x_ref));
  ILLM_REQUIRE_OK(reference().add_bias(x_ref.data(), ld, m, int(ld) - 2, bias.data()));
  ILLM_REQUIRE_OK(device().add_bias(dx.get(), ld, m, int(ld) - 2, dbias.get()));
  ILLM_CHECK(nmse(dx.read(), x_ref) <= exact_ops, "add_bias nmse {}", nmse(dx.read(), x_ref));
}

ILLM_CASE("ops", "rope table and rotation, exact far beyond training positions") {
  const std::vector<int32_t> pos = {0, 1, 7, 255, 4097, 100000, 1048575, 2000000000};
  const int m = int(pos.size()), hd = 50, heads = 3;
  std::vector<float> table_ref(size_t(m) * hd);
  // Llama 3.1's scaled frequencies: every band of the blend is crossed by some pair.
  const gpu::rope_frequencies freq{500000.0f, gpu::rope_scaling_kind::llama3, 8.0f, 1.0f, 4.0f, 8192};
  ILLM_REQUIRE_OK(reference().rope_table(pos.data(), m, hd, freq, table_ref.data()));
  device_array<int32_t> dpos(device(), pos);
  device_array<float> dtable(device(), size_t(m) * hd);
  ILLM_REQUIRE_OK(device().rope_table(dpos.get(), m, hd, freq, dtable.get()));
  const auto table = dtable.read();
  double worst = 0;
  for (size_t i = 0; i < table.size(); ++i) worst = std::max(worst, double(std::abs(table[i] - table_ref[i])));
  ILLM_CHECK(worst <= 2e-7, "largest table difference {}", worst);
  const size_t ld = size_t(heads) * hd + 4;
  auto x_ref = random_floats(size_t(m) * ld, 21);
  device_array<float> dx(device(), x_ref);
  ILLM_REQUIRE_OK(reference().rope(x_ref.data(), ld, m, heads, hd, table_ref.data()));
  ILLM_REQUIRE_OK(device().rope(dx.get(), ld, m, heads, hd, dtable.get()));
  ILLM_CHECK(nmse(dx.read(), x_ref) <= exact_ops, "rope nmse {}", nmse(dx.read(), x_ref));
}

ILLM_CASE("ops", "silu_mul, plain and gpt-oss's (alpha, limit, up + 1)") {
  const int m = 3, n = 1001;
  const size_t ld_in = 1010, ld_out = 1003;
  const auto gate = random_floats(size_t(m) * ld_in, 31, 12.0f), up = random_floats(size_t(m) * ld_in, 32, 10.0f);
  for (const gpu::gated_activation act : {gpu::gated_activation{}, gpu::gated_activation{1.702f, 7.0f, 1.0f}}) {
    std::vector<float> ref(size_t(m) * ld_out, 0.0f);
    ILLM_REQUIRE_OK(reference().silu_mul(gate.data(), up.data(), ld_in, m, n, ref.data(), ld_out, act));
    device_array<float> dg(device(), gate), du(device(), up), dout(device(), std::vector<float>(ref.size(), 0.0f));
    ILLM_REQUIRE_OK(device().silu_mul(dg.get(), du.get(), ld_in, m, n, dout.get(), ld_out, act));
    ILLM_CHECK(nmse(dout.read(), ref) <= exact_ops, "silu_mul nmse {}", nmse(dout.read(), ref));
  }
}

ILLM_CASE("ops", "embed and gather_rows copy rows exactly") {
  const int vocab = 1000, dim = 67;
  const auto table = random_floats(size_t(vocab) * dim, 41);
  const std::vector<int32_t> tokens = {0, 5, 999, 5, 17, 998};
  const int m = int(tokens.size());
  const size_t ld_out = 70;
  std::vector<float> ref(size_t(m) * ld_out, 0.0f);
  device_array<int32_t> dtokens(device(), tokens);
  for (dtype type : {dtype::f16, dtype::bf16, dtype::f32}) {
    // The table as the type holds it (whole bytes, read as floats where the array wants them).
    std::vector<float> stored(table.size());
    quantize(type, table.data(), table.size(), stored.data());
    std::fill(ref.begin(), ref.end(), 0.0f);
    ILLM_REQUIRE_OK(reference().embed(tokens.data(), m, stored.data(), type, dim, ref.data(), ld_out));
    device_array<float> dtable(device(), stored), dout(device(), std::vector<float>(ref.size(), 0.0f));
    ILLM_REQUIRE_OK(device().embed(dtokens.get(), m, dtable.get(), type, dim, dout.get(), ld_out));
    ILLM_CHECK(dout.read() == ref, "embedded {} rows differ", gpu::to_string(type));
  }
  const std::vector<int32_t> rows = {4, 0, 2};
  std::vector<float> gathered_ref(3 * 40, 0.0f);
  ILLM_REQUIRE_OK(reference().gather_rows(ref.data(), ld_out, rows.data(), 3, 33, gathered_ref.data(), 40));
  device_array<int32_t> drows(device(), rows);
  device_array<float> dgathered(device(), std::vector<float>(3 * 40, 0.0f));
  device_array<float> dref(device(), ref);
  ILLM_REQUIRE_OK(device().gather_rows(dref.get(), ld_out, drows.get(), 3, 33, dgathered.get(), 40));
  ILLM_CHECK(dgathered.read() == gathered_ref, "gathered rows differ");
}

ILLM_CASE("ops", "store_kv writes K and V in the pool's type") {
  for (dtype type : all_types) {
    const gpu::kv_layout layout{2, 3, 40, type};
    const uint32_t n_blocks = 7;
    const size_t elements = layout.block_elements() * n_blocks;
    auto pool = gpu::kv_pool::create(device(), layout, n_blocks);
    ILLM_REQUIRE(pool.is_ok(), "{}", pool.error().message());
    std::vector<uint8_t> zeros(elements * gpu::dtype_bytes(type), 0);
    ILLM_REQUIRE_OK(device().upload(pool->base(), zeros.data(), zeros.size()));
    const int m = 11;
    const size_t ld = size_t(layout.n_kv_heads) * layout.head_dim + 3;
    const auto k = random_floats(size_t(m) * ld, 51), v = random_floats(size_t(m) * ld, 52);
    std::vector<uint32_t> slots;
    for (int i = 0; i < m; ++i) slots.push_back(uint32_t((i * 37 + 5) % (n_blocks * 16)));
    device_array<float> dk(device(), k), dv(device(), v);
    device_array<uint32_t> dslots(device(), slots);
    ILLM_REQUIRE_OK(device().store_kv(dk.get(), dv.get(), ld, m, layout.n_kv_heads, layout.head_dim,
                                      pool->layer_view(1), dslots.get()));
    std::vector<uint8_t> got(zeros.size());
    ILLM_REQUIRE_OK(device().download(got.data(), pool->base(), got.size()));
    // The expected image: zeros, with each token's K and V of layer 1 in its slot.
    std::vector<float> expected(elements, 0.0f);
    const gpu::kv_layer_view view = pool->layer_view(1);
    for (int i = 0; i < m; ++i)
      for (int h = 0; h < layout.n_kv_heads; ++h)
        for (int d = 0; d < layout.head_dim; ++d) {
          const size_t at = size_t(slots[size_t(i)] / 16) * view.block_stride + size_t(h) * view.head_stride +
                            size_t(slots[size_t(i)] % 16) * layout.head_dim + d;
          expected[at + view.k_offset] = k[size_t(i) * ld + size_t(h) * layout.head_dim + d];
          expected[at + view.v_offset] = v[size_t(i) * ld + size_t(h) * layout.head_dim + d];
        }
    ILLM_CHECK(got == to_type(expected, type), "{} pool image differs", gpu::to_string(type));
  }
}

ILLM_CASE("ops", "merge of partials, empty ones included, with and without sink logits") {
  const int n_q = 3, n_heads = 5, hd = 37, rows = n_q * n_heads;
  const size_t out_ld = size_t(n_heads) * hd + 6;
  const auto sinks = random_floats(size_t(n_heads), 64, 4.0f);
  device_array<float> dsinks(device(), sinks);
  for (int parts : {1, 2, 5, -2}) {
    const bool with_sinks = parts < 0;
    parts = std::abs(parts);
    auto m = random_floats(size_t(parts) * rows, 61, 4.0f), e = random_floats(size_t(parts) * rows, 62),
         ma = random_floats(size_t(parts) * rows * hd, 63);
    for (float& x : e) x = std::abs(x) * 10;
    for (int r = 0; r < rows; r += 3) {  // part 0 saw no key for every third row
      m[size_t(r)] = -std::numeric_limits<float>::infinity();
      e[size_t(r)] = 0.0f;
      std::fill(ma.begin() + r * hd, ma.begin() + (r + 1) * hd, 0.0f);
    }
    std::vector<float> ref(size_t(n_q) * out_ld, 0.0f);
    ILLM_REQUIRE_OK(reference().merge(m.data(), e.data(), ma.data(), parts, n_q, n_heads, hd, ref.data(), out_ld,
                                      with_sinks ? sinks.data() : nullptr));
    device_array<float> dm(device(), m), de(device(), e), dma(device(), ma), dout(device(), ref.size());
    ILLM_REQUIRE_OK(dout.write(std::vector<float>(ref.size(), 0.0f)));
    ILLM_REQUIRE_OK(device().merge(dm.get(), de.get(), dma.get(), parts, n_q, n_heads, hd, dout.get(), out_ld,
                                   with_sinks ? dsinks.get() : nullptr));
    ILLM_CHECK(nmse(dout.read(), ref) <= exact_ops, "{} parts: nmse {}", parts, nmse(dout.read(), ref));
  }
}

ILLM_CASE("ops", "sampling: greedy on the device, temperature and top-p as the host sampler") {
  const int n = 4, vocab = 1003;
  const size_t ld = 1010;
  auto logits = random_floats(size_t(n) * ld, 71, 5.0f);
  logits[0 * ld + 500] = logits[0 * ld + 20] = 9.0f;  // a tie: the lower index wins
  logits[2 * ld + 1002] = 8.5f;                         // the maximum at the last column
  const std::vector<gpu::sampling_params> params = {{0.0f, 1.0f}, {0.8f, 0.9f}, {0.0f, 1.0f}, {1.3f, 1.0f}};
  std::vector<uint64_t> rng_ref = {1, 2, 3, 4}, rng = rng_ref;
  std::vector<int32_t> ref(n), got(n);
  ILLM_REQUIRE_OK(reference().sample(logits.data(), ld, n, vocab, params.data(), rng_ref.data(), ref.data()));
  device_array<float> dlogits(device(), logits);
  ILLM_REQUIRE_OK(device().sample(dlogits.get(), ld, n, vocab, params.data(), rng.data(), got.data()));
  ILLM_CHECK(got == ref, "tokens {} {} {} {} vs {} {} {} {}", got[0], got[1], got[2], got[3], ref[0], ref[1], ref[2],
             ref[3]);
  ILLM_CHECK(got[0] == 20, "the tie went to {}", got[0]);
  ILLM_CHECK(rng == rng_ref, "the sampling streams advanced differently");
}

ILLM_CASE("ops", "KV blocks copy between pools and download whole") {
  const gpu::kv_layout layout{3, 2, 24, dtype::f16};
  const uint32_t n_blocks = 9;
  const size_t bytes = layout.block_bytes() * n_blocks;
  std::vector<uint8_t> a(bytes), b(bytes, 0);
  std::mt19937 rng(81);
  for (auto& x : a) x = uint8_t(rng());
  device_array<uint8_t> da(device(), a), db(device(), b);
  const std::vector<uint32_t> src = {8, 0, 3, 4}, dst = {1, 2, 7, 0};
  ILLM_REQUIRE_OK(device().copy_blocks(db.get(), dst.data(), da.get(), src.data(), int(src.size()),
                                       layout.block_bytes()));
  for (size_t i = 0; i < src.size(); ++i)
    std::memcpy(b.data() + dst[i] * layout.block_bytes(), a.data() + src[i] * layout.block_bytes(),
                layout.block_bytes());
  ILLM_CHECK(db.read() == b, "copied blocks differ");
  std::vector<uint8_t> host(src.size() * layout.block_bytes()), expected;
  ILLM_REQUIRE_OK(device().download_blocks(host.data(), da.get(), src.data(), int(src.size()), layout.block_bytes()));
  for (uint32_t s : src)
    expected.insert(expected.end(), a.begin() + s * layout.block_bytes(), a.begin() + (s + 1) * layout.block_bytes());
  ILLM_CHECK(host == expected, "downloaded blocks differ");
}

ILLM_CASE("ops", "KV blocks of a device pool cross the host: read out, landed in slots, uploaded into another pool") {
  const gpu::kv_layout layout{3, 2, 24, dtype::f16};
  const uint32_t n_blocks = 9;
  const size_t block_bytes = layout.block_bytes();
  std::shared_ptr<gpu::backend> via(&device(), [](gpu::backend*) {});  // the runner's, not owned
  auto a = gpu::kv_pool::create(device(), layout, n_blocks), b = gpu::kv_pool::create(device(), layout, n_blocks);
  ILLM_REQUIRE(a.is_ok() && b.is_ok(), "pools");
  std::vector<uint8_t> bytes(block_bytes * n_blocks);
  std::mt19937 rng(83);
  for (auto& x : bytes) x = uint8_t(rng());
  ILLM_REQUIRE_OK(device().upload(a->base(), bytes.data(), bytes.size()));
  const std::vector<uint32_t> src = {8, 0, 3, 4}, dst = {1, 2, 7, 0};
  // Read out in chunks of 3 through two buffers, as a move's puts read them.
  auto staging = gpu::outgoing_staging::create(via, block_bytes, 3, 2);
  ILLM_REQUIRE_OK(staging.error());
  auto head = staging.value()->read(a.value(), std::span(src).first(3));
  auto tail = staging.value()->read(a.value(), std::span(src).subspan(3));
  ILLM_REQUIRE_OK(head.error());
  ILLM_REQUIRE_OK(tail.error());
  ILLM_REQUIRE(head.value() && tail.value(), "two chunks staged in two buffers");
  auto third = staging.value()->read(a.value(), std::span(src).first(1));
  ILLM_CHECK(third.is_ok() && !third.value(), "a third chunk staged while both buffers are in use");
  ILLM_CHECK(!staging.value()->read(a.value(), src).is_ok(), "4 blocks read into chunks of 3");
  auto sent = a->checksum(src);
  ILLM_REQUIRE_OK(sent.error());
  ILLM_CHECK(tail.value()->checksum(head.value()->checksum()) == sent.value(),
             "the staged chunks' checksum differs from the pool's");
  std::vector<const void*> staged;
  for (const auto* chunk : {&head.value(), &tail.value()})
    for (size_t i = 0; i < (*chunk)->size(); ++i) staged.push_back((*chunk)->data(i));
  auto landing = gpu::kv_landing::create(via, block_bytes, 6);
  ILLM_REQUIRE_OK(landing.error());
  ILLM_CHECK(landing.value()->take(7).empty(), "7 of 6 slots taken");
  const std::vector<uint32_t> slots = landing.value()->take(4);
  ILLM_REQUIRE(slots.size() == 4, "4 slots");
  for (size_t i = 0; i < src.size(); ++i)  // as the data plane's puts write them
    std::memcpy(static_cast<char*>(landing.value()->base()) + slots[i] * block_bytes, staged[i], block_bytes);
  head.value().reset();  // its puts are done: the buffer is free again
  ILLM_CHECK(staging.value()->free_buffers() == 1, "{} buffers free after a chunk was freed", staging.value()->free_buffers());
  ILLM_REQUIRE_OK(landing.value()->land(device(), b.value(), slots, dst));
  landing.value()->give_back(slots);
  ILLM_CHECK(landing.value()->free_slots() == 6, "{} slots free after giving back", landing.value()->free_slots());
  auto arrived = b->checksum(dst);
  ILLM_REQUIRE_OK(arrived.error());
  ILLM_CHECK(arrived.value() == sent.value(), "the blocks arrived with another checksum");
  std::vector<uint8_t> got(block_bytes);
  for (size_t i = 0; i < src.size(); ++i) {
    ILLM_REQUIRE_OK(device().download(got.data(), b->block_data(dst[i]), block_bytes));
    ILLM_CHECK(std::equal(got.begin(), got.end(), bytes.begin() + src[i] * block_bytes), "block {} -> {} differs",
               src[i], dst[i]);
  }
}

// ---- MicroAttention -------------------------------------------------------------------------------

/// A batch of sequences whose blocks are spread over pools: per pool one micro_attention_batch call
/// (a job per sequence), then a merge per sequence; the device and the reference see the same values
/// (rounded to the KV type; slots past each context hold NaN, which attention must never read).
struct attention_case {
  dtype type;
  int head_dim, group, n_kv_heads, n_pools;
  std::vector<int> contexts;  // one sequence per context
  int n_q;
  float q_scale;
  uint64_t seed;
  int window = 0;  // a query sees its last `window` positions (0: all)
};

std::string describe(const attention_case& c) {
  return gpu::text::format("{} KV, head_dim {}, group {}, kv heads {}, pools {}, {} queries, window {}, contexts {}",
                           gpu::to_string(c.type), c.head_dim, c.group, c.n_kv_heads, c.n_pools, c.n_q, c.window,
                           gpu::text::join(c.contexts, " "));
}

/// One sequence's data: queries and its blocks per pool, on the host.
struct sequence_data {
  std::vector<float> q;  // [n_q][q_ld]
  std::vector<int32_t> q_pos;
  std::vector<std::vector<uint32_t>> blocks;  // per pool
  std::vector<std::vector<int32_t>> block_pos;
};

void run_attention_case(const attention_case& c) {
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int hd = c.head_dim, n_heads = c.group * c.n_kv_heads;
  const size_t q_ld = size_t(n_heads) * hd + 3;
  const gpu::kv_layout layout{1, c.n_kv_heads, hd, c.type};
  uint32_t total_blocks = 0;
  for (int ctx : c.contexts) total_blocks += gpu::blocks_for_tokens(ctx);
  const size_t pool_elements = layout.block_elements() * total_blocks;
  std::vector<std::vector<float>> images(size_t(c.n_pools),
                                         std::vector<float>(pool_elements, std::numeric_limits<float>::quiet_NaN()));
  std::vector<uint32_t> next_free(size_t(c.n_pools), 0);
  std::vector<sequence_data> seqs(c.contexts.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int ctx = c.contexts[s];
    sequence_data& d = seqs[s];
    d.blocks.resize(size_t(c.n_pools));
    d.block_pos.resize(size_t(c.n_pools));
    for (uint32_t b = 0; b < gpu::blocks_for_tokens(ctx); ++b) {
      const size_t p = rng() % uint64_t(c.n_pools);
      const uint32_t phys = next_free[p]++;
      for (int t = 0; t < 16 && int(b) * 16 + t < ctx; ++t)
        for (int h = 0; h < c.n_kv_heads; ++h)
          for (int dim = 0; dim < hd; ++dim) {
            const size_t at = phys * layout.block_elements() + size_t(h) * layout.head_stride() + size_t(t) * hd + dim;
            images[p][at + layout.k_offset(0)] = gpu::round_to(c.type, u(rng));
            images[p][at + layout.v_offset(0)] = gpu::round_to(c.type, u(rng));
          }
      d.blocks[p].push_back(phys);
      d.block_pos[p].push_back(int32_t(b) * 16);
    }
    d.q.resize(size_t(c.n_q) * q_ld);
    for (float& x : d.q) x = u(rng) * c.q_scale;
    for (int t = 0; t < c.n_q; ++t) d.q_pos.push_back(ctx - c.n_q + t);
  }
  const gpu::attention_shape shape{n_heads, c.n_kv_heads, hd, c.window};
  const size_t rows = size_t(c.n_q) * n_heads, parts = size_t(c.n_pools);
  // Partials per sequence, stacked over pools as merge reads them: [pools][rows] m, e; [pools][rows][hd] ma.
  std::vector<std::vector<float>> ref_m(seqs.size(), std::vector<float>(parts * rows)), ref_e = ref_m,
                                                     ref_ma(seqs.size(), std::vector<float>(parts * rows * hd));
  std::vector<std::unique_ptr<device_array<float>>> dev_m, dev_e, dev_ma, dev_q;
  std::vector<std::unique_ptr<device_array<int32_t>>> dev_pos, dev_bpos;
  std::vector<std::unique_ptr<device_array<uint32_t>>> dev_blocks;
  for (const sequence_data& d : seqs) {
    dev_m.push_back(std::make_unique<device_array<float>>(device(), parts * rows));
    dev_e.push_back(std::make_unique<device_array<float>>(device(), parts * rows));
    dev_ma.push_back(std::make_unique<device_array<float>>(device(), parts * rows * hd));
    dev_q.push_back(std::make_unique<device_array<float>>(device(), d.q));
    dev_pos.push_back(std::make_unique<device_array<int32_t>>(device(), d.q_pos));
  }
  for (int p = 0; p < c.n_pools; ++p) {
    const size_t pp = size_t(p);
    auto pool = gpu::kv_pool::create(device(), layout, std::max(total_blocks, 1u));
    ILLM_REQUIRE(pool.is_ok(), "{}", pool.error().message());
    ILLM_REQUIRE_OK(device().upload(pool->base(), to_type(images[pp], c.type).data(),
                                    pool_elements * gpu::dtype_bytes(c.type)));
    gpu::kv_layer_view ref_view = pool->layer_view(0);
    ref_view.base = images[pp].data();
    ref_view.type = dtype::f32;
    std::vector<gpu::attention_job> ref_jobs, dev_jobs;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const sequence_data& d = seqs[s];
      const int nb = int(d.blocks[pp].size());
      ref_jobs.push_back({d.q.data(), q_ld, d.q_pos.data(), c.n_q, d.blocks[pp].data(), d.block_pos[pp].data(), nb,
                          ref_m[s].data() + pp * rows, ref_e[s].data() + pp * rows,
                          ref_ma[s].data() + pp * rows * hd});
      dev_blocks.push_back(std::make_unique<device_array<uint32_t>>(device(), std::max<size_t>(1, d.blocks[pp].size())));
      dev_bpos.push_back(std::make_unique<device_array<int32_t>>(device(), std::max<size_t>(1, d.blocks[pp].size())));
      if (nb > 0) {
        ILLM_REQUIRE_OK(dev_blocks.back()->write(d.blocks[pp]));
        ILLM_REQUIRE_OK(dev_bpos.back()->write(d.block_pos[pp]));
      }
      dev_jobs.push_back({dev_q[s]->get(), q_ld, dev_pos[s]->get(), c.n_q, dev_blocks.back()->get(),
                          dev_bpos.back()->get(), nb, dev_m[s]->get() + pp * rows, dev_e[s]->get() + pp * rows,
                          dev_ma[s]->get() + pp * rows * hd});
    }
    ILLM_REQUIRE_OK(reference().micro_attention_batch(shape, ref_view, ref_jobs));
    ILLM_REQUIRE_OK(device().micro_attention_batch(shape, pool->layer_view(0), dev_jobs));
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    const double em = nmse(dev_m[s]->read(), ref_m[s]), ee = nmse(dev_e[s]->read(), ref_e[s]),
                 ema = nmse(dev_ma[s]->read(), ref_ma[s]);
    ILLM_CHECK(em <= attention && ee <= attention && ema <= attention,
               "{}; sequence {}: nmse m {} e {} ma {}", describe(c), s, em, ee, ema);
    const size_t out_ld = size_t(n_heads) * hd + 1;
    std::vector<float> ref_out(size_t(c.n_q) * out_ld, 0.0f);
    ILLM_REQUIRE_OK(reference().merge(ref_m[s].data(), ref_e[s].data(), ref_ma[s].data(), c.n_pools, c.n_q, n_heads,
                                      hd, ref_out.data(), out_ld, nullptr));
    device_array<float> dout(device(), std::vector<float>(ref_out.size(), 0.0f));
    ILLM_REQUIRE_OK(device().merge(dev_m[s]->get(), dev_e[s]->get(), dev_ma[s]->get(), c.n_pools, c.n_q, n_heads, hd,
                                   dout.get(), out_ld, nullptr));
    const double eo = nmse(dout.read(), ref_out);
    ILLM_CHECK(eo <= attention, "{}; sequence {}: merged output nmse {}", describe(c), s, eo);
  }
}

/// Random cases: contexts from `contexts`, queries per sequence from `queries`.
void random_attention_cases(const std::vector<int>& contexts, const std::vector<int>& queries, int sequences,
                            uint64_t seed, int count, bool windows = false) {
  std::mt19937_64 rng(seed);
  const int head_dims[] = {32, 50, 64, 80, 128, 256};
  for (int i = 0; i < count; ++i) {
    attention_case c{all_types[rng() % 3], head_dims[rng() % 6], 1 << (rng() % 4), 1 + int(rng() % 3),
                     1 + int(rng() % 3), {}, queries[rng() % queries.size()], rng() % 2 ? 1.0f : 6.0f, rng()};
    for (int s = 0; s < sequences; ++s) c.contexts.push_back(std::max(c.n_q, contexts[rng() % contexts.size()]));
    if (windows) c.window = 1 + int(rng() % 150);
    run_attention_case(c);
  }
}

ILLM_CASE("attention", "decode MicroAttention matches the reference (f32, f16, bf16 KV; GQA; odd sizes)") {
  random_attention_cases({1, 2, 15, 16, 17, 33, 100, 250, 1000}, {1, 2, 3}, 3, 101, test::emulated() ? 24 : 60);
}

ILLM_CASE("attention", "prefill MicroAttention matches the reference (causal chunks over cached blocks)") {
  random_attention_cases({9, 17, 40, 100, 300}, {9, 17, 37, 64}, 2, 102, test::emulated() ? 16 : 40);
}

ILLM_CASE("attention", "sliding windows match the reference, decode and prefill") {
  random_attention_cases({1, 17, 100, 300}, {1, 3}, 2, 105, test::emulated() ? 5 : 30, true);
  random_attention_cases({17, 100, 300}, {17, 37}, 2, 106, test::emulated() ? 5 : 30, true);
}

ILLM_CASE("attention", "sixteen rows take the decode kernel, seventeen the prefill kernel") {
  for (dtype type : all_types) {
    run_attention_case({type, 64, 8, 2, 2, {40, 71}, 2, 6.0f, 103});  // 16 rows per kv head
    run_attention_case({type, 64, 1, 2, 2, {40, 71}, 17, 6.0f, 104});  // 17 rows per kv head
  }
}

ILLM_CASE("attention", "head_dim 256 with f32 KV: more than 48 KiB of shared memory per block") {
  run_attention_case({dtype::f32, 256, 8, 1, 2, {300, 47}, 2, 6.0f, 109});  // decode, 16 rows
  run_attention_case({dtype::f32, 256, 2, 2, 1, {300}, 40, 1.0f, 110});     // prefill
  run_attention_case({dtype::bf16, 256, 4, 1, 1, {77}, 4, 1.0f, 111});
}

ILLM_CASE("attention", "long contexts split into block ranges and combine") {
  const int context = test::emulated() ? 5000 : 100000;
  run_attention_case({dtype::f16, 128, 4, 2, 1, {context}, 1, 1.0f, 105});
  run_attention_case({dtype::bf16, 64, 1, 2, 3, {context, 7}, 3, 6.0f, 106});
  run_attention_case({dtype::f32, 128, 2, 1, 1, {context / 2}, 20, 1.0f, 107});
}

ILLM_CASE("attention", "batches larger than one launch's job table") {
  std::vector<int> contexts;
  for (int i = 0; i < 300; ++i) contexts.push_back(1 + (i * 7919) % 90);
  run_attention_case({dtype::f16, 64, 4, 1, 2, contexts, 1, 1.0f, 108});
}

}  // namespace
