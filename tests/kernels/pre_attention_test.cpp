// The fused pre-attention kernel against fp4::cpu::pre_attention, in two stages:
// 1. the normed and rotated vectors (q and index_q as emitted, K and index-K as inserted)
//    against the CPU's, within the bound derived below;
// 2. the cache bytes, exactly, against cpu::cache_insert run on the GPU's own K and index-K
//    (and the raw V): the whole pools are compared, pre-filled with fresh random bytes, so a
//    byte written where it should not be, or not written, shows.
// Geometries: M3 (64 / 4 heads of 128, 4 index heads, partial RoPE 64, Gemma norms) in every
// K/V and index page format, and smaller ones without norms, with full or no RoPE, dense
// layers. Tokens: a prefill chunk across a page boundary, positions 0 and 2^18 - 1, random
// decode positions, and a token whose page is missing (the GPU inserts nothing for it).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/pre_attention.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using kvcache::PageDType;
using kvcache::PageLayout;

struct Geometry {
  const char* name;
  int q_heads, kv_heads, head_dim;
  int index_heads, index_head_dim;  // 0: a dense layer
  int rotary_dim;
  bool norms, gemma;
  bool q_in_place;  // q_out is q's own (dense) buffer
};

const Geometry kM3{"M3", 64, 4, 128, 4, 128, 64, true, true, false};
const Geometry kOthers[] = {
    {"8/2 x 64, full RoPE, no norms, in place", 8, 2, 64, 2, 64, 64, false, false, true},
    {"dense 4/4 x 32, RoPE 16", 4, 4, 32, 0, 0, 16, true, false, false},
    {"16/1 x 256, index 1 x 16, no RoPE", 16, 1, 256, 1, 16, 0, true, true, false},
    // Heads narrower than a 16-value block: the K/V pages flatten a token's heads into one group,
    // so the kernel stages them (one CTA a token).
    {"8/4 x 8 (flattened pages), index 1 x 16, RoPE 8", 8, 4, 8, 1, 16, 8, true, false, false},
};

// One step: tokens at (sequence, position); pages only for the blocks the tokens write to.
struct Step {
  std::vector<int32_t> positions, seq_of_token, tables;
  int64_t num_seqs = 0, max_blocks = 0, num_pages = 0, valid_tokens = 0;
};

// The valid tokens first; the last token's block has no page (-1), the GPU-only case. Sequence
// 0 is a prefill chunk of `chunk` tokens from position 100, across blocks 0 and 1 at least.
Step make_step(std::mt19937_64& rng, int32_t chunk) {
  constexpr int64_t kPage = kvcache::kPageTokens;
  Step s;
  std::vector<std::pair<int32_t, int32_t>> tokens;  // (seq, position)
  for (int32_t p = 100; p < 100 + chunk; ++p) tokens.emplace_back(0, p);
  tokens.emplace_back(1, 0);
  tokens.emplace_back(2, (1 << 18) - 1);
  tokens.emplace_back(3, 1 << 17);
  std::uniform_int_distribution<int32_t> position(0, (1 << 18) - 1);
  for (int32_t seq = 4; seq < 12; ++seq) tokens.emplace_back(seq, position(rng));
  s.valid_tokens = static_cast<int64_t>(tokens.size());
  tokens.emplace_back(12, 5000);  // no page
  s.num_seqs = 13;
  s.max_blocks = (1 << 18) / kPage;
  s.tables.assign(s.num_seqs * s.max_blocks, -1);
  std::map<std::pair<int32_t, int64_t>, int32_t> pages;
  for (int64_t i = 0; i < s.valid_tokens; ++i) pages.try_emplace({tokens[i].first, tokens[i].second / kPage}, 0);
  std::vector<int32_t> ids(pages.size() + 3);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int next = 0;
  for (auto& [key, page] : pages) s.tables[key.first * s.max_blocks + key.second] = ids[next++];
  s.num_pages = static_cast<int64_t>(ids.size());
  for (auto [seq, pos] : tokens) {
    s.seq_of_token.push_back(seq);
    s.positions.push_back(pos);
  }
  return s;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& x : b) x = static_cast<uint8_t>(byte(rng));
  return b;
}

// Stage 1's bound, per head vector of the CPU's output y (max |y| = m):
// - the GPU sums the squares in another order; in double the sums differ by about dim x 2^-53
//   relative, so the float 1/rms can differ by one rounding, 2^-24 relative: |dy| <= 2^-23 m
//   after the product's own rounding;
// - cos and sin are double functions rounded to float; a one-ulp difference of either (2^-24
//   absolute, |cos|, |sin| <= 1) moves a rotated value by 2^-24 (|x0| + |x1|) <= 2^-23 m, plus
//   the rounding of the sum, 2^-24 m.
// Together under 2^-21 m; the check takes 2^-20 m. In practice almost every value is
// bit-identical, which the test also requires of 99% of them.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t dim, const char* what,
                  int64_t rows_checked) {
  int64_t identical = 0, total = 0;
  for (int64_t r = 0; r < rows_checked; ++r) {
    float m = 0.0f;
    for (int64_t i = 0; i < dim; ++i) m = std::max(m, std::abs(want[r * dim + i]));
    const float tol = std::ldexp(m, -20);
    for (int64_t i = 0; i < dim; ++i) {
      const float g = got[r * dim + i], w = want[r * dim + i];
      ASSERT_LE(std::abs(g - w), tol) << what << " row " << r << " value " << i << ": got " << g << ", want " << w;
      identical += g == w;
      ++total;
    }
  }
  EXPECT_GE(identical, total * 99 / 100) << what << ": only " << identical << " of " << total << " values bit-identical";
}

void run_case(const Geometry& g, PageDType kv_dtype, PageDType index_dtype, std::mt19937_64& rng,
              int32_t chunk = 40) {
  SCOPED_TRACE(std::string(g.name) + ", K/V " + std::string(kvcache::page_dtype_name(kv_dtype)) + ", index " +
               std::string(kvcache::page_dtype_name(index_dtype)) + ", chunk " + std::to_string(chunk));
  const bool index = g.index_heads > 0;
  const Step step = make_step(rng, chunk);
  const int64_t all = static_cast<int64_t>(step.positions.size()), valid = step.valid_tokens;
  const int64_t qw = int64_t{g.q_heads} * g.head_dim, kvw = int64_t{g.kv_heads} * g.head_dim;
  const int64_t iqw = int64_t{g.index_heads} * g.index_head_dim, ikw = g.index_head_dim;
  // One fused projection output [q | k | v | index_q | index_k | 3 spare], as a fused GEMM writes.
  const int64_t stride = qw + 2 * kvw + iqw + ikw + 3;
  std::vector<float> proj = testing::random_floats(all * stride, testing::Distribution::kGaussian, rng);
  std::uniform_real_distribution<float> magnitude(-6.0f, 6.0f);
  for (int64_t t = 0; t < all; ++t) {  // rows of different magnitudes
    const float scale = std::exp2(magnitude(rng));
    for (int64_t i = 0; i < stride; ++i) proj[t * stride + i] *= scale;
  }
  auto weight = [&](int64_t dim) {
    if (!g.norms) return std::vector<float>{};
    auto w = testing::random_floats(dim, testing::Distribution::kGaussian, rng);
    for (float& x : w) x = g.gemma ? 0.2f * x : 1.0f + 0.2f * x;
    return w;
  };
  const auto q_norm = weight(g.head_dim), k_norm = weight(g.head_dim);
  const auto iq_norm = weight(g.index_head_dim), ik_norm = weight(g.index_head_dim);
  const PageLayout kv_layout = kvcache::kv_page_layout(kv_dtype, g.kv_heads, g.head_dim);
  const PageLayout index_layout = index ? kvcache::index_page_layout(index_dtype, g.index_head_dim) : PageLayout{};
  std::uniform_real_distribution<float> log2_scale(-6.0f, 2.0f);
  kvcache::KvScales kv_scales;
  if (kv_dtype == PageDType::kFP8 || kv_dtype == PageDType::kNVFP4) kv_scales = {std::exp2(log2_scale(rng)), std::exp2(log2_scale(rng))};
  const float index_scale = index_dtype == PageDType::kFP8 ? std::exp2(log2_scale(rng)) : 1.0f;
  const auto kv_before = random_bytes(step.num_pages * kv_layout.page_bytes, rng);
  const auto index_before = index ? random_bytes(step.num_pages * index_layout.page_bytes, rng) : std::vector<uint8_t>{};

  auto params = [&](const float* p, const float* q_dense, const int32_t* positions, const int32_t* seqs,
                    const int32_t* tables, int64_t tokens, const float* qn, const float* kn, const float* iqn,
                    const float* ikn) {
    PreAttentionParams pa{
        .ctx = {positions, seqs, tables, tokens, step.num_seqs, step.max_blocks},
        .q = {g.q_in_place ? q_dense : p, g.q_in_place ? qw : stride, qn},
        .k = {p + qw, stride, kn},
        .v = {p + qw + kvw, stride, nullptr},
        .q_heads = g.q_heads, .kv_heads = g.kv_heads, .head_dim = g.head_dim,
        .index_q = {}, .index_k = {}, .eps = 1e-6f, .gemma = g.gemma, .rotary_dim = g.rotary_dim, .theta = 5e6,
        .kv_layout = &kv_layout, .kv_scales = kv_scales, .num_pages = step.num_pages};
    if (index) {
      pa.index_q = {p + qw + 2 * kvw, stride, iqn};
      pa.index_k = {p + qw + 2 * kvw + iqw, stride, ikn};
      pa.index_heads = g.index_heads;
      pa.index_head_dim = g.index_head_dim;
      pa.index_layout = &index_layout;
      pa.index_scale = index_scale;
    }
    return pa;
  };
  auto ptr = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  std::vector<float> q_dense(all * qw);
  for (int64_t t = 0; t < all; ++t) std::copy_n(&proj[t * stride], qw, &q_dense[t * qw]);

  // The CPU reference on the valid tokens.
  std::vector<uint8_t> cpu_kv = kv_before, cpu_index = index_before;
  std::vector<float> want_q(valid * qw), want_iq(valid * iqw), want_k(valid * kvw), want_ik(valid * ikw);
  PreAttentionParams c = params(proj.data(), q_dense.data(), step.positions.data(), step.seq_of_token.data(),
                                step.tables.data(), valid, ptr(q_norm), ptr(k_norm), ptr(iq_norm), ptr(ik_norm));
  c.kv_pool = cpu_kv.data();
  c.q_out = want_q.data();
  c.k_out = want_k.data();
  if (index) {
    c.index_pool = cpu_index.data();
    c.index_q_out = want_iq.data();
    c.index_k_out = want_ik.data();
  }
  cpu::pre_attention(c);

  // The GPU on every token, outputs poisoned.
  const cuda::DeviceBuffer d_proj = cuda::DeviceBuffer::copy_of(proj), d_q_dense = cuda::DeviceBuffer::copy_of(q_dense), d_pos = cuda::DeviceBuffer::copy_of(step.positions),
                           d_seq = cuda::DeviceBuffer::copy_of(step.seq_of_token), d_tables = cuda::DeviceBuffer::copy_of(step.tables),
                           d_qn = cuda::DeviceBuffer::copy_of(q_norm), d_kn = cuda::DeviceBuffer::copy_of(k_norm), d_iqn = cuda::DeviceBuffer::copy_of(iq_norm),
                           d_ikn = cuda::DeviceBuffer::copy_of(ik_norm), d_kv = cuda::DeviceBuffer::copy_of(kv_before), d_index = cuda::DeviceBuffer::copy_of(index_before);
  cuda::DeviceBuffer d_q_out(all * qw * 4), d_k_out(all * kvw * 4), d_iq_out(std::max<int64_t>(all * iqw, 1) * 4),
      d_ik_out(std::max<int64_t>(all * ikw, 1) * 4);
  for (auto* b : {&d_q_out, &d_k_out, &d_iq_out, &d_ik_out}) b->fill(0xFF);  // NaN
  PreAttentionParams d = params(d_proj.as<float>(), d_q_dense.as<float>(), d_pos.as<int32_t>(), d_seq.as<int32_t>(),
                                d_tables.as<int32_t>(), all, g.norms ? d_qn.as<float>() : nullptr,
                                g.norms ? d_kn.as<float>() : nullptr, g.norms ? d_iqn.as<float>() : nullptr,
                                g.norms ? d_ikn.as<float>() : nullptr);
  d.kv_pool = d_kv.as<uint8_t>();
  d.q_out = g.q_in_place ? d_q_dense.as<float>() : d_q_out.as<float>();
  d.k_out = d_k_out.as<float>();
  if (index) {
    d.index_pool = d_index.as<uint8_t>();
    d.index_q_out = d_iq_out.as<float>();
    d.index_k_out = d_ik_out.as<float>();
  }
  cuda::pre_attention(d, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());

  // Stage 1.
  const auto got_q = (g.q_in_place ? d_q_dense : d_q_out).download_vector<float>(all * qw);
  const auto got_k = d_k_out.download_vector<float>(all * kvw);
  expect_close(got_q, want_q, g.head_dim, "q", valid * g.q_heads);
  expect_close(got_k, want_k, g.head_dim, "k", valid * g.kv_heads);
  // The token without a page still gets its q: the CPU's for that row alone, written to a page
  // of scratch pools.
  {
    const int32_t pos = step.positions[all - 1], seq = 0;
    std::vector<int32_t> table(1 + pos / kvcache::kPageTokens, 0);
    std::vector<uint8_t> scratch_kv = kv_before, scratch_index = index_before;
    std::vector<float> lone_q(qw), lone_iq(iqw);
    PreAttentionParams one = c;
    one.ctx = {&pos, &seq, table.data(), 1, 1, static_cast<int64_t>(table.size())};
    one.q.x = g.q_in_place ? q_dense.data() + (all - 1) * qw : proj.data() + (all - 1) * stride;
    one.k.x += (all - 1) * stride;
    one.v.x += (all - 1) * stride;
    one.kv_pool = scratch_kv.data();
    one.q_out = lone_q.data();
    one.k_out = nullptr;
    if (index) {
      one.index_q.x += (all - 1) * stride;
      one.index_k.x += (all - 1) * stride;
      one.index_pool = scratch_index.data();
      one.index_q_out = lone_iq.data();
      one.index_k_out = nullptr;
    }
    cpu::pre_attention(one);
    expect_close(std::vector<float>(got_q.end() - qw, got_q.end()), lone_q, g.head_dim, "q of the pageless token",
                 g.q_heads);
    if (index) {
      const auto got_iq = d_iq_out.download_vector<float>(all * iqw);
      expect_close(std::vector<float>(got_iq.end() - iqw, got_iq.end()), lone_iq, g.index_head_dim,
                   "index_q of the pageless token", g.index_heads);
    }
  }
  std::vector<float> got_ik;
  if (index) {
    const auto got_iq = d_iq_out.download_vector<float>(all * iqw);
    got_ik = d_ik_out.download_vector<float>(all * ikw);
    expect_close(got_iq, want_iq, g.index_head_dim, "index_q", valid * g.index_heads);
    expect_close(got_ik, want_ik, g.index_head_dim, "index_k", valid);
  }
  if (::testing::Test::HasFatalFailure()) return;

  // Stage 2: cache_insert of the GPU's own K (and index-K) and the raw V, at the valid tokens'
  // slots; the pageless token must have left no byte.
  std::vector<int64_t> slots(valid);
  for (int64_t t = 0; t < valid; ++t) {
    const int64_t page = step.tables[step.seq_of_token[t] * step.max_blocks + step.positions[t] / kvcache::kPageTokens];
    slots[t] = page * kvcache::kPageTokens + step.positions[t] % kvcache::kPageTokens;
  }
  std::vector<float> v(valid * kvw);
  for (int64_t t = 0; t < valid; ++t) std::copy_n(&proj[t * stride + qw + kvw], kvw, &v[t * kvw]);
  std::vector<uint8_t> want_kv = kv_before;
  cpu::cache_insert({.layout = &kv_layout, .pool = want_kv.data(), .num_pages = step.num_pages, .k = got_k.data(),
                     .v = v.data(), .slots = slots.data(), .tokens = valid, .scales = kv_scales});
  const auto got_kv = d_kv.download_vector<uint8_t>(kv_before.size());
  for (size_t i = 0; i < got_kv.size(); ++i) {
    ASSERT_EQ(got_kv[i], want_kv[i]) << "K/V page " << i / kv_layout.page_bytes << " byte " << i % kv_layout.page_bytes
                                     << (got_kv[i] == kv_before[i] ? " (not written)" : "");
  }
  if (index) {
    std::vector<uint8_t> want_index = index_before;
    cpu::cache_insert({.layout = &index_layout, .pool = want_index.data(), .num_pages = step.num_pages,
                       .k = got_ik.data(), .v = nullptr, .slots = slots.data(), .tokens = valid,
                       .scales = {index_scale, 1.0f}});
    const auto got_index = d_index.download_vector<uint8_t>(index_before.size());
    for (size_t i = 0; i < got_index.size(); ++i) {
      ASSERT_EQ(got_index[i], want_index[i]) << "index page " << i / index_layout.page_bytes << " byte "
                                             << i % index_layout.page_bytes
                                             << (got_index[i] == index_before[i] ? " (not written)" : "");
    }
  }
  // The CPU reference wrote the slots of the same formula: its pools are exactly cache_insert
  // of its own K and index-K at those slots.
  std::vector<uint8_t> cpu_expected = kv_before;
  cpu::cache_insert({.layout = &kv_layout, .pool = cpu_expected.data(), .num_pages = step.num_pages,
                     .k = want_k.data(), .v = v.data(), .slots = slots.data(), .tokens = valid, .scales = kv_scales});
  EXPECT_TRUE(cpu_expected == cpu_kv) << "the CPU reference's K/V cache differs from cache_insert at the slots";
  if (index) {
    std::vector<uint8_t> cpu_index_expected = index_before;
    cpu::cache_insert({.layout = &index_layout, .pool = cpu_index_expected.data(), .num_pages = step.num_pages,
                       .k = want_ik.data(), .v = nullptr, .slots = slots.data(), .tokens = valid,
                       .scales = {index_scale, 1.0f}});
    EXPECT_TRUE(cpu_index_expected == cpu_index) << "the CPU reference's index cache differs from cache_insert";
  }
}

class PreAttentionKernel : public testing::GpuTest {};

const PageDType kDtypes[] = {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4};

TEST_F(PreAttentionKernel, M3GeometryInEveryPageFormat) {
  auto rng = testing::seeded_rng(31);
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    for (size_t j = 0; j < std::size(kDtypes); ++j) {
      run_case(kM3, kDtypes[i], kDtypes[j], rng);
      if (HasFatalFailure()) return;
    }
  }
}

// A prefill chunk long enough that the launcher gives each token one CTA (past about four CTAs
// an SM on any GPU of up to 300 SMs), whose warps then work through all of a token's vectors.
TEST_F(PreAttentionKernel, PrefillChunkOfOneCtaAToken) {
  auto rng = testing::seeded_rng(33);
  run_case(kM3, PageDType::kNVFP4, PageDType::kNVFP4, rng, 1200);
  if (HasFatalFailure()) return;
  run_case(kM3, PageDType::kBF16, PageDType::kFP8, rng, 1200);
}

// The launcher's CTAs a token (a host function, so this runs without a GPU too), at M3's 77
// head vectors (64 q, 4 k, 4 v, 4 index q, 1 index k): ten while the step is small, fewer past
// about four CTAs an SM, one from there on, and one whenever the inserts are staged.
TEST(PreAttentionPlan, CtasATokenFollowTheStepsSize) {
  cuda::detail::PreAttentionArgs a;
  for (int heads : {64, 4, 4, 4, 1}) a.sets[a.num_sets++].heads = heads;
  struct Case { int sms, tokens, parts; };
  for (const Case c : {Case{132, 1, 10}, Case{132, 52, 10}, Case{132, 53, 10}, Case{132, 60, 9},
                       Case{132, 128, 5}, Case{132, 527, 2}, Case{132, 528, 1}, Case{132, 8192, 1},
                       Case{78, 1, 10}, Case{78, 64, 5}, Case{78, 312, 1}, Case{1, 1, 4}}) {
    a.tokens = c.tokens;
    EXPECT_EQ(cuda::detail::pre_attention_parts(a, c.sms), c.parts) << c.sms << " SMs, " << c.tokens << " tokens";
  }
  a.stage_floats = 1024;
  a.tokens = 1;
  EXPECT_EQ(cuda::detail::pre_attention_parts(a, 132), 1) << "staged inserts";
}

TEST_F(PreAttentionKernel, OtherGeometries) {
  auto rng = testing::seeded_rng(32);
  for (const Geometry& g : kOthers) {
    for (size_t i = 0; i < std::size(kDtypes); ++i) {
      run_case(g, kDtypes[i], kDtypes[(i + 1) % std::size(kDtypes)], rng);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace fp4
