// GPU pre-attention rows of `fp4serve bench`. Each token of a decode batch is the next token of
// its own sequence, on its own page; the prefill chunk is one sequence's first 8,192 tokens.
#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/pre_attention.h"
#include "tools/fp4serve/bench_pre_attention.h"

namespace fp4::bench {
namespace {

using kvcache::PageDType;

constexpr int64_t kQHeads = 64, kKvHeads = 4, kDim = 128, kIndexHeads = 4, kRotary = 64;
constexpr int64_t kQ = kQHeads * kDim, kKv = kKvHeads * kDim, kIq = kIndexHeads * kDim, kIk = kDim;
constexpr int64_t kStride = kQ + 2 * kKv + kIq + kIk;  // one fused projection row
constexpr int64_t kCheckedTokens = 8;

struct Shape {
  int64_t tokens;
  bool prefill;
};

// Max |got - want| over each head against 2^-20 of the head's max |want|: the kernel test's
// bound (tests/kernels/pre_attention_test.cpp derives it).
bool within_bound(const std::vector<float>& got, const std::vector<float>& want, int64_t dim) {
  for (size_t r = 0; r < want.size() / dim; ++r) {
    float m = 0.0f;
    for (int64_t i = 0; i < dim; ++i) m = std::max(m, std::abs(want[r * dim + i]));
    for (int64_t i = 0; i < dim; ++i) {
      if (!(std::abs(got[r * dim + i] - want[r * dim + i]) <= std::ldexp(m, -20))) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<Row> bench_pre_attention(const std::string& device, double copy_gbps, int reps) {
  std::vector<Row> rows;
  std::mt19937_64 rng(0x9E7A);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto gaussian = [&](int64_t n, float mean, float sd) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = mean + sd * normal(rng);
    return v;
  };
  const auto q_norm = gaussian(kDim, 0.0f, 0.2f), k_norm = gaussian(kDim, 0.0f, 0.2f);
  const auto iq_norm = gaussian(kDim, 0.0f, 0.2f), ik_norm = gaussian(kDim, 0.0f, 0.2f);
  const cuda::DeviceBuffer d_qn = cuda::DeviceBuffer::copy_of(q_norm), d_kn = cuda::DeviceBuffer::copy_of(k_norm), d_iqn = cuda::DeviceBuffer::copy_of(iq_norm),
                           d_ikn = cuda::DeviceBuffer::copy_of(ik_norm);
  for (PageDType dtype : {PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
    const kvcache::PageLayout kv_layout = kvcache::kv_page_layout(dtype, kKvHeads, kDim);
    const kvcache::PageLayout index_layout = kvcache::index_page_layout(dtype, kDim);
    const kvcache::KvScales kv_scales = dtype == PageDType::kFP8 ? kvcache::KvScales{1.0f / 64, 1.0f / 64}
                                                                 : kvcache::KvScales{};
    const float index_scale = dtype == PageDType::kFP8 ? 1.0f / 64 : 1.0f;
    for (Shape shape : {Shape{1, false}, Shape{8, false}, Shape{32, false}, Shape{128, false}, Shape{8192, true}}) {
      const int64_t t = shape.tokens;
      std::vector<int32_t> positions(t), seqs(t), tables;
      int64_t num_seqs = 0, max_blocks = 0, num_pages = 0;
      std::uniform_int_distribution<int32_t> position(0, (1 << 18) - 1);
      if (shape.prefill) {
        std::iota(positions.begin(), positions.end(), 0);
        num_seqs = 1;
        max_blocks = num_pages = t / kvcache::kPageTokens;
        tables.resize(max_blocks);
        std::iota(tables.begin(), tables.end(), 0);
      } else {
        num_seqs = num_pages = t;
        max_blocks = (1 << 18) / kvcache::kPageTokens;
        tables.assign(num_seqs * max_blocks, -1);
        for (int64_t i = 0; i < t; ++i) {
          positions[i] = position(rng);
          seqs[i] = static_cast<int32_t>(i);
          tables[i * max_blocks + positions[i] / kvcache::kPageTokens] = static_cast<int32_t>(i);
        }
      }
      const auto proj = gaussian(t * kStride, 0.0f, 1.0f);
      const cuda::DeviceBuffer d_proj = cuda::DeviceBuffer::copy_of(proj), d_pos = cuda::DeviceBuffer::copy_of(positions), d_seqs = cuda::DeviceBuffer::copy_of(seqs),
                               d_tables = cuda::DeviceBuffer::copy_of(tables);
      cuda::DeviceBuffer d_kv(num_pages * kv_layout.page_bytes), d_index(num_pages * index_layout.page_bytes),
          d_q(t * kQ * 4), d_iq(t * kIq * 4);
      const float* p = d_proj.as<float>();
      PreAttentionParams pa{
          .ctx = {d_pos.as<int32_t>(), d_seqs.as<int32_t>(), d_tables.as<int32_t>(), t, num_seqs, max_blocks},
          .q = {p, kStride, d_qn.as<float>()}, .k = {p + kQ, kStride, d_kn.as<float>()},
          .v = {p + kQ + kKv, kStride, nullptr}, .q_heads = kQHeads, .kv_heads = kKvHeads, .head_dim = kDim,
          .index_q = {p + kQ + 2 * kKv, kStride, d_iqn.as<float>()},
          .index_k = {p + kQ + 2 * kKv + kIq, kStride, d_ikn.as<float>()}, .index_heads = kIndexHeads,
          .index_head_dim = kDim, .eps = 1e-6f, .gemma = true, .rotary_dim = kRotary, .theta = 5e6,
          .kv_layout = &kv_layout, .kv_pool = d_kv.as<uint8_t>(), .kv_scales = kv_scales,
          .index_layout = &index_layout, .index_pool = d_index.as<uint8_t>(), .index_scale = index_scale,
          .num_pages = num_pages, .q_out = d_q.as<float>(), .index_q_out = d_iq.as<float>()};
      auto run = [&](cudaStream_t s) { cuda::pre_attention(pa, s); };

      bool validated = false;
      if (t == kCheckedTokens) {
        std::vector<uint8_t> kv(num_pages * kv_layout.page_bytes), index(num_pages * index_layout.page_bytes);
        std::vector<float> want_q(t * kQ), want_iq(t * kIq);
        PreAttentionParams c = pa;
        c.ctx = {positions.data(), seqs.data(), tables.data(), t, num_seqs, max_blocks};
        c.q = {proj.data(), kStride, q_norm.data()};
        c.k = {proj.data() + kQ, kStride, k_norm.data()};
        c.v = {proj.data() + kQ + kKv, kStride, nullptr};
        c.index_q = {proj.data() + kQ + 2 * kKv, kStride, iq_norm.data()};
        c.index_k = {proj.data() + kQ + 2 * kKv + kIq, kStride, ik_norm.data()};
        c.kv_pool = kv.data();
        c.index_pool = index.data();
        c.q_out = want_q.data();
        c.index_q_out = want_iq.data();
        cpu::pre_attention(c);
        d_q.fill(0xFF);
        d_iq.fill(0xFF);
        run(nullptr);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> got_q(want_q.size()), got_iq(want_iq.size());
        d_q.download(got_q.data(), got_q.size() * 4);
        d_iq.download(got_iq.data(), got_iq.size() * 4);
        if (!within_bound(got_q, want_q, kDim) || !within_bound(got_iq, want_iq, kDim))
          fail_internal("pre_attention ({}) disagrees with the CPU reference", kvcache::page_dtype_name(dtype));
        validated = true;
      }
      const double cache_row_bytes = 2.0 * kKvHeads * (kv_layout.code_row_bytes + kv_layout.scale_row_bytes) +
                                     index_layout.code_row_bytes + index_layout.scale_row_bytes;
      const double bytes = double(t) * (4.0 * kStride + 4.0 * (kQ + kIq) + cache_row_bytes);
      const double ms = cuda::median_ms(run, 3, reps);
      rows.push_back({device, fmt::format("pre-attention {} caches", kvcache::page_dtype_name(dtype)),
                      fmt::format("{} {} tokens", t, shape.prefill ? "prefill" : "decode"), bytes, ms, copy_gbps,
                      validated});
    }
  }
  return rows;
}

}  // namespace fp4::bench
