// The CPU backend's model ops against slow, obviously correct references written here in
// double precision, on fresh random inputs. Paged ops run over shuffled page tables so that the
// indirection is exercised, and over every page format: the references then read the same pages
// back with kvcache::read_page, so a quantized cache is checked against attention on its
// dequantized values (the codec itself is tested bit-exactly in tests/unit/kvcache).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "formats/attention_operands.h"
#include "formats/e4m3_query.h"
#include "formats/minifloat.h"
#include "formats/mxfp8.h"
#include "tests/support/expect_error.h"
#include "tests/support/paged_batch.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using kvcache::PageDType;
constexpr double kEps32 = 0x1p-24;

TEST(CpuLinear, MatchesDoubleReferenceWithinAccumulationBound) {
  auto rng = testing::seeded_rng(1);
  for (auto [m, n, k] : {std::tuple{1, 7, 5}, {3, 64, 172}, {70, 33, 256}}) {
    const auto x = testing::random_floats(m * k, testing::Distribution::kGaussian, rng);
    const auto w = testing::random_floats(n * k, testing::Distribution::kStudentT3, rng);
    std::vector<float> y(m * n);
    cpu::linear({.x = x.data(), .w = w.data(), .y = y.data(), .m = m, .n = n, .k = k});
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double exact = 0, magnitude = 0;
        for (int e = 0; e < k; ++e) {
          exact += double{x[i * k + e]} * w[j * k + e];
          magnitude += std::abs(double{x[i * k + e]} * w[j * k + e]);
        }
        // Eight lanes of k/8 sequential adds, then a 4-deep combine and the tail: each term
        // passes through at most k/8 + 4 + 8 roundings of relative size 2^-24.
        const double bound = (k / 8.0 + 12) * kEps32 * magnitude;
        EXPECT_NEAR(y[i * n + j], exact, bound) << m << "x" << n << "x" << k;
      }
    }
  }
}

// BF16- and MXFP8-held weights and BF16 tables are the same numbers as their FP32 decoding, so
// the results are the FP32 path's bit for bit; and giving two forms of the weight, an MXFP8
// weight without scales or k not whole MXFP8 blocks is refused.
TEST(CpuLinear, Bf16AndMxfp8WeightsGiveTheFp32PathsBits) {
  auto rng = testing::seeded_rng(11);
  const int m = 5, n = 19, k = 64;
  const auto x = testing::random_floats(m * k, testing::Distribution::kGaussian, rng);
  auto w = testing::random_floats(n * k, testing::Distribution::kStudentT3, rng);
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    bits[i] = bf16_encode(w[i]);
    w[i] = bf16_decode(bits[i]);
  }
  std::vector<float> want(m * n), got(m * n, -1.0f);
  cpu::linear({.x = x.data(), .w = w.data(), .y = want.data(), .m = m, .n = n, .k = k});
  cpu::linear({.x = x.data(), .w = nullptr, .y = got.data(), .m = m, .n = n, .k = k, .w_bf16 = bits.data()});
  EXPECT_EQ(got, want);
  EXPECT_THROW(cpu::linear({.x = x.data(), .w = w.data(), .y = got.data(), .m = m, .n = n, .k = k,
                            .w_bf16 = bits.data()}),
               Error);

  // MXFP8 codes of the same numbers (each 32-run of a row made exact first), the same bits.
  std::vector<float> w8 = w;
  std::vector<uint8_t> codes(w.size()), scales(w.size() / kMxfp8BlockElems);
  for (size_t b = 0; b < scales.size(); ++b) {
    float* block = w8.data() + b * kMxfp8BlockElems;
    scales[b] = mxfp8_quantize_block(block, codes.data() + b * kMxfp8BlockElems);
    mxfp8_dequantize_block(codes.data() + b * kMxfp8BlockElems, scales[b], block);
  }
  cpu::linear({.x = x.data(), .w = w8.data(), .y = want.data(), .m = m, .n = n, .k = k});
  std::fill(got.begin(), got.end(), -1.0f);
  cpu::linear({.x = x.data(), .y = got.data(), .m = m, .n = n, .k = k, .w_e4m3 = codes.data(),
               .w_scales = scales.data()});
  EXPECT_EQ(got, want);
  EXPECT_THROW(cpu::linear({.x = x.data(), .y = got.data(), .m = m, .n = n, .k = k, .w_e4m3 = codes.data()}),
               Error);  // no scales
  EXPECT_THROW(cpu::linear({.x = x.data(), .y = got.data(), .m = m, .n = n - 1, .k = k - 8,
                            .w_e4m3 = codes.data(), .w_scales = scales.data()}),
               Error);  // k not whole blocks

  const std::vector<int32_t> ids = {3, 0, 18, 3};
  std::vector<float> rows(ids.size() * k), rows_bf16(ids.size() * k, -1.0f);
  cpu::gather_rows({.table = w.data(), .table_rows = n, .dim = k, .ids = ids.data(), .count = 4, .out = rows.data()});
  cpu::gather_rows({.table = nullptr, .table_rows = n, .dim = k, .ids = ids.data(), .count = 4,
                    .out = rows_bf16.data(), .table_bf16 = bits.data()});
  EXPECT_EQ(rows_bf16, rows);
}

TEST(CpuRope, RotatesHalfSplitPairsOfTheLeadingDims) {
  auto rng = testing::seeded_rng(2);
  const int tokens = 5, heads = 3, dim = 16, rot = 8;
  auto x = testing::random_floats(tokens * heads * dim, testing::Distribution::kGaussian, rng);
  const auto original = x;
  const std::vector<int32_t> positions = {0, 1, 17, 300, 4099};
  cpu::rope({.x = x.data(), .positions = positions.data(), .tokens = tokens, .heads = heads,
             .head_dim = dim, .rotary_dim = rot, .theta = 5e6});
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* a = &original[(t * heads + h) * dim];
      const float* b = &x[(t * heads + h) * dim];
      for (int j = 0; j < rot / 2; ++j) {
        const double angle = positions[t] * std::pow(5e6, -2.0 * j / rot);
        const double c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
        // Two products and one add in float: within 2 ulps of the magnitudes involved.
        const double tol = 4 * kEps32 * (std::abs(a[j]) + std::abs(a[j + rot / 2]));
        EXPECT_NEAR(b[j], a[j] * c - a[j + rot / 2] * s, tol);
        EXPECT_NEAR(b[j + rot / 2], a[j + rot / 2] * c + a[j] * s, tol);
      }
      for (int j = rot; j < dim; ++j) EXPECT_EQ(b[j], a[j]) << "dims beyond rotary_dim move";
      if (positions[t] == 0) {
        for (int j = 0; j < dim; ++j) EXPECT_EQ(b[j], a[j]) << "position 0 is the identity";
      }
    }
  }
}

TEST(CpuRouter, BiasChoosesExpertsButWeightsComeFromScores) {
  auto rng = testing::seeded_rng(3);
  const int tokens = 9, experts = 16, top_k = 4;
  const auto logits = testing::random_floats(tokens * experts, testing::Distribution::kGaussian, rng);
  const auto bias = testing::random_floats(experts, testing::Distribution::kGaussian, rng);
  std::vector<int32_t> ids(tokens * top_k);
  std::vector<float> weights(tokens * top_k);
  cpu::router({.logits = logits.data(), .bias = bias.data(), .tokens = tokens, .experts = experts,
               .top_k = top_k, .expert_ids = ids.data(), .weights = weights.data()});
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    auto sig = [&](int e) { return 1.0 / (1.0 + std::exp(-double{logits[t * experts + e]})); };
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return sig(a) + bias[a] > sig(b) + bias[b]; });
    double sum = 0;
    for (int i = 0; i < top_k; ++i) sum += sig(order[i]);
    for (int i = 0; i < top_k; ++i) {
      EXPECT_EQ(ids[t * top_k + i], order[i]);
      // sigmoid and a k-term sum in float: a few ulps.
      EXPECT_NEAR(weights[t * top_k + i], sig(order[i]) / sum, 16 * kEps32);
    }
  }
}

// Forced experts: the router's own choice given back in any order reproduces its ids and
// weights bit for bit; another set is taken, ordered by s + bias and weighted by its own scores;
// an id out of range or named twice is refused.
TEST(CpuRouter, ForcedExpertsAreOrderedAndWeightedAsAChoice) {
  auto rng = testing::seeded_rng(4);
  const int tokens = 7, experts = 16, top_k = 4;
  const auto logits = testing::random_floats(tokens * experts, testing::Distribution::kGaussian, rng);
  const auto bias = testing::random_floats(experts, testing::Distribution::kGaussian, rng);
  std::vector<int32_t> ids(tokens * top_k), forced_ids(tokens * top_k);
  std::vector<float> weights(tokens * top_k), forced_weights(tokens * top_k);
  RouterParams p{.logits = logits.data(), .bias = bias.data(), .tokens = tokens, .experts = experts,
                 .top_k = top_k, .expert_ids = ids.data(), .weights = weights.data()};
  cpu::router(p);
  std::vector<int32_t> reversed = ids;
  for (int t = 0; t < tokens; ++t) std::reverse(reversed.begin() + t * top_k, reversed.begin() + (t + 1) * top_k);
  RouterParams f = p;
  f.expert_ids = forced_ids.data();
  f.weights = forced_weights.data();
  f.forced_ids = reversed.data();
  cpu::router(f);
  EXPECT_EQ(forced_ids, ids);
  EXPECT_EQ(forced_weights, weights);

  // Each token takes experts its router did not choose: the top_k it ranks last.
  std::vector<int32_t> others(tokens * top_k);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int32_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    auto choice = [&](int e) { return 1.0f / (1.0f + std::exp(-logits[t * experts + e])) + bias[e]; };
    std::sort(order.begin(), order.end(), [&](int a, int b) { return choice(a) < choice(b); });
    std::copy_n(order.begin(), top_k, others.begin() + t * top_k);  // ascending choice: reversed below
  }
  f.forced_ids = others.data();
  cpu::router(f);
  for (int t = 0; t < tokens; ++t) {
    auto sig = [&](int e) { return 1.0 / (1.0 + std::exp(-double{logits[t * experts + e]})); };
    double sum = 0;
    for (int i = 0; i < top_k; ++i) sum += sig(others[t * top_k + i]);
    for (int i = 0; i < top_k; ++i) {
      const int32_t want = others[t * top_k + top_k - 1 - i];  // descending s + bias
      EXPECT_EQ(forced_ids[t * top_k + i], want);
      EXPECT_NEAR(forced_weights[t * top_k + i], sig(want) / sum, 16 * kEps32);  // as above
    }
  }

  std::vector<int32_t> bad = ids;
  bad[5] = experts;
  f.forced_ids = bad.data();
  testing::expect_error([&] { cpu::router(f); }, {"token 1", "distinct", "16"});
  bad[5] = bad[4];
  testing::expect_error([&] { cpu::router(f); }, {"token 1", "distinct"});
}

using testing::PagedBatch;

// Exact small integers make every dot product exact in float and double, and make ties common,
// so the selection rule (including ties to the lower block id) is checked exactly.
std::vector<float> small_integers(size_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

std::vector<int32_t> reference_selection(const std::vector<float>& q, const std::vector<float>& keys,
                                         int64_t pos, int64_t dim, int64_t topk, int64_t init,
                                         int64_t local) {
  const int64_t blocks = pos / 128 + 1;
  std::vector<int32_t> out;
  if (blocks <= topk) {
    for (int64_t b = 0; b < blocks; ++b) out.push_back(static_cast<int32_t>(b));
  } else {
    std::vector<double> score(blocks, -INFINITY);
    for (int64_t j = 0; j <= pos; ++j) {
      double s = 0;
      for (int64_t e = 0; e < dim; ++e) s += double{q[e]} * keys[j * dim + e];
      score[j / 128] = std::max(score[j / 128], s);
    }
    std::vector<int32_t> rest;
    for (int64_t b = 0; b < blocks; ++b) {
      if (b < init || b >= blocks - local) out.push_back(static_cast<int32_t>(b));
      else rest.push_back(static_cast<int32_t>(b));
    }
    std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
    rest.resize(topk - out.size());
    out.insert(out.end(), rest.begin(), rest.end());
    std::sort(out.begin(), out.end());
  }
  out.resize(topk, -1);
  return out;
}

TEST(CpuIndexer, SelectsForcedThenBestBlocksAscendingWithTiesToLowerIds) {
  auto rng = testing::seeded_rng(4);
  const int64_t heads = 2, dim = 16, topk = 16;
  for (int64_t init : {0, 1}) {
    PagedBatch f({1, 127, 128, 2048, 2049, 2600}, 3, rng);
    const auto layout = kvcache::index_page_layout(PageDType::kFP32, dim);
    std::vector<uint8_t> pool(f.num_pages * layout.page_bytes, 0xFF);  // NaN until written
    std::vector<std::vector<float>> keys(f.num_seqs);
    for (int64_t s = 0; s < f.num_seqs; ++s) {
      keys[s] = small_integers(f.context[s] * dim, rng);
      for (int64_t j = 0; j < f.context[s]; ++j) {
        const int64_t slot = f.slot(s, j);
        kvcache::write_index_token(layout, &pool[slot / 128 * layout.page_bytes], slot % 128,
                                   &keys[s][j * dim]);
      }
    }
    const auto q = small_integers(f.tokens() * heads * dim, rng);
    std::vector<int32_t> selected(heads * f.tokens() * topk, 7);
    cpu::indexer_topk({.ctx = f.ctx(), .layout = &layout, .pool = pool.data(),
                       .num_pages = f.num_pages, .scale = 1.0f, .index_q = q.data(), .heads = heads,
                       .head_dim = dim, .topk = topk, .init_blocks = init, .local_blocks = 1,
                       .selected = selected.data()});
    for (int64_t t = 0; t < f.tokens(); ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const std::vector<float> qh(q.begin() + (t * heads + h) * dim,
                                    q.begin() + (t * heads + h + 1) * dim);
        const auto want = reference_selection(qh, keys[f.seq_of_token[t]], f.positions[t], dim,
                                              topk, init, 1);
        const std::vector<int32_t> got(selected.begin() + (h * f.tokens() + t) * topk,
                                       selected.begin() + (h * f.tokens() + t + 1) * topk);
        EXPECT_EQ(got, want) << "position " << f.positions[t] << " head " << h << " init " << init;
      }
    }
  }
}

// The FP8 query formats score the query as formats/e4m3_query.h rounds it, per head and token.
// Gaussian queries so the rounding changes them; rounded, they are multiples of 2^-9 under 2^9
// in their head's scaled units, so with small-integer keys every score is exact and the
// selection must be the double reference's on the rounded query, ties included.
TEST(CpuIndexer, Fp8QueryFormatsScoreTheRoundedQuery) {
  auto rng = testing::seeded_rng(5);
  const int64_t heads = 3, dim = 32, topk = 8;
  PagedBatch f({1, 1000, 2049, 3000}, 3, rng);
  const auto layout = kvcache::index_page_layout(PageDType::kFP32, dim);
  std::vector<uint8_t> pool(f.num_pages * layout.page_bytes, 0xFF);
  std::vector<std::vector<float>> keys(f.num_seqs);
  for (int64_t s = 0; s < f.num_seqs; ++s) {
    keys[s] = small_integers(f.context[s] * dim, rng);
    for (int64_t j = 0; j < f.context[s]; ++j) {
      const int64_t slot = f.slot(s, j);
      kvcache::write_index_token(layout, &pool[slot / 128 * layout.page_bytes], slot % 128, &keys[s][j * dim]);
    }
  }
  const auto q = testing::random_floats(f.tokens() * heads * dim, testing::Distribution::kGaussian, rng);
  for (IndexQueryFormat format : {IndexQueryFormat::kE4M3, IndexQueryFormat::kE4M3x2}) {
    const int parts = format == IndexQueryFormat::kE4M3x2 ? 2 : 1;
    std::vector<int32_t> selected(heads * f.tokens() * topk, 7);
    cpu::indexer_topk({.ctx = f.ctx(), .layout = &layout, .pool = pool.data(), .num_pages = f.num_pages,
                       .scale = 1.0f, .index_q = q.data(), .heads = heads, .head_dim = dim, .topk = topk,
                       .init_blocks = 1, .local_blocks = 1, .selected = selected.data(), .query_format = format});
    int rounded_differently = 0;
    for (int64_t t = 0; t < f.tokens(); ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> qh(q.begin() + (t * heads + h) * dim, q.begin() + (t * heads + h + 1) * dim);
        float amax = 0.0f;
        for (float x : qh) amax = std::max(amax, std::abs(x));
        const int shift = e4m3_query_shift(amax);
        for (float& x : qh) {
          const float rounded = e4m3_query_decode(e4m3_query_encode(x, shift, parts), shift);
          rounded_differently += rounded != x;
          x = rounded;
        }
        const auto want = reference_selection(qh, keys[f.seq_of_token[t]], f.positions[t], dim, topk, 1, 1);
        const std::vector<int32_t> got(selected.begin() + (h * f.tokens() + t) * topk,
                                       selected.begin() + (h * f.tokens() + t + 1) * topk);
        EXPECT_EQ(got, want) << "position " << f.positions[t] << " head " << h << " parts " << parts;
      }
    }
    EXPECT_GT(rounded_differently, 0) << "the rounding must change Gaussian queries";
  }
}

class CpuPagedAttention : public ::testing::TestWithParam<PageDType> {};

bool f16_operands(PageDType dtype) { return dtype == PageDType::kFP8 || dtype == PageDType::kNVFP4; }

// A query head as 16-bit operands take it, written out here from the scalar codecs: FP16 after
// scaling the head's largest magnitude into [2^13, 2^14) by a power of two, or BF16 as is.
std::vector<float> rounded_head(const float* x, int64_t n, bool f16) {
  std::vector<float> out(x, x + n);
  if (!f16) {
    for (float& v : out) v = bf16_decode(bf16_encode(v));
    return out;
  }
  float amax = 0.0f;
  for (float v : out) amax = std::max(amax, std::abs(v));
  int e = 0;
  std::frexp(amax, &e);  // amax in [2^(e - 1), 2^e)
  const int shift = amax > 0.0f ? std::min(14 - e, 126) : 0;
  for (float& v : out) v = std::ldexp(fp16_decode(fp16_encode(std::ldexp(v, shift))), -shift);
  return out;
}

TEST_P(CpuPagedAttention, MatchesDoubleAttentionOnTheDequantizedCache) {
  auto rng = testing::seeded_rng(5 + static_cast<int>(GetParam()));
  const int64_t q_heads = 8, kv_heads = 2, dim = 32, topk = 16;
  const float scale = 1.0f / std::sqrt(float(dim));
  for (bool sparse : {false, true}) {
    PagedBatch f({1, 130, 2049, 2600}, 2, rng);
    const auto layout = kvcache::kv_page_layout(GetParam(), kv_heads, dim);
    std::vector<uint8_t> pool(f.num_pages * layout.page_bytes, 0xFF);
    const int64_t vec = kv_heads * dim;
    // What attention must see: the values as stored, read back through the page reference.
    std::vector<std::vector<float>> k_seen(f.num_seqs), v_seen(f.num_seqs);
    for (int64_t s = 0; s < f.num_seqs; ++s) {
      const auto k = testing::random_floats(f.context[s] * vec, testing::Distribution::kGaussian, rng);
      const auto v = testing::random_floats(f.context[s] * vec, testing::Distribution::kGaussian, rng);
      std::vector<int64_t> slots(f.context[s]);
      for (int64_t j = 0; j < f.context[s]; ++j) slots[j] = f.slot(s, j);
      cpu::cache_insert({.layout = &layout, .pool = pool.data(), .num_pages = f.num_pages,
                         .k = k.data(), .v = v.data(), .slots = slots.data(), .tokens = f.context[s], .scales = {}});
      k_seen[s].resize(k.size());
      v_seen[s].resize(v.size());
      for (int64_t j = 0; j < f.context[s]; j += 128) {
        const int n = static_cast<int>(std::min<int64_t>(128, f.context[s] - j));
        kvcache::read_page(layout, &pool[slots[j] / 128 * layout.page_bytes], n, &k_seen[s][j * vec],
                           &v_seen[s][j * vec]);
      }
    }
    const auto q_given = testing::random_floats(f.tokens() * q_heads * dim, testing::Distribution::kGaussian, rng);
    // A random selection per (KV head, token) that keeps the local block, in ascending order.
    std::vector<int32_t> selected(kv_heads * f.tokens() * topk, -1);
    for (int64_t g = 0; g < kv_heads; ++g) {
      for (int64_t t = 0; t < f.tokens(); ++t) {
        const int32_t blocks = f.positions[t] / 128 + 1;
        std::vector<int32_t> ids(blocks - 1);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        ids.resize(std::min<size_t>(ids.size(), topk - 1));
        ids.push_back(blocks - 1);
        std::sort(ids.begin(), ids.end());
        std::copy(ids.begin(), ids.end(), &selected[(g * f.tokens() + t) * topk]);
      }
    }
    for (AttentionOperands operands : {AttentionOperands::kFP32, AttentionOperands::k16Bit}) {
    const bool rounded = operands == AttentionOperands::k16Bit, f16 = f16_operands(GetParam());
    std::vector<float> out(f.tokens() * q_heads * dim, NAN);
    cpu::paged_attention({.ctx = f.ctx(), .layout = &layout, .pool = pool.data(),
                          .num_pages = f.num_pages, .scales = {}, .q = q_given.data(), .out = out.data(),
                          .q_heads = q_heads, .kv_heads = kv_heads, .head_dim = dim,
                          .softmax_scale = scale, .selected = sparse ? selected.data() : nullptr,
                          .topk = sparse ? topk : 0, .operands = operands});
    // The reference's operands: the query heads rounded as given below, each weight rounded
    // relative to the final maximum (the CPU rounds it relative to the running one).
    std::vector<float> q = q_given;
    for (int64_t row = 0; rounded && row < f.tokens() * q_heads; ++row) {
      const auto r = rounded_head(&q_given[row * dim], dim, f16);
      std::copy(r.begin(), r.end(), &q[row * dim]);
    }
    auto weight16 = [&](double w) { return rounded ? double{round_to_16bit(static_cast<float>(w), f16)} : w; };
    for (int64_t t = 0; t < f.tokens(); ++t) {
      const int64_t s = f.seq_of_token[t], pos = f.positions[t];
      for (int64_t h = 0; h < q_heads; ++h) {
        const int64_t g = h / (q_heads / kv_heads);
        std::vector<bool> visible(pos + 1, !sparse);
        if (sparse) {
          for (int i = 0; i < topk; ++i) {
            const int32_t b = selected[(g * f.tokens() + t) * topk + i];
            for (int64_t j = b * 128; b >= 0 && j < std::min<int64_t>(pos + 1, b * 128 + 128); ++j) visible[j] = true;
          }
        }
        std::vector<double> logit(pos + 1, -INFINITY);
        double max_logit = -INFINITY, max_abs_logit = 0, max_v = 0;
        for (int64_t j = 0; j <= pos; ++j) {
          if (!visible[j]) continue;
          double d = 0;
          for (int64_t e = 0; e < dim; ++e) d += double{q[(t * q_heads + h) * dim + e]} * k_seen[s][j * vec + g * dim + e];
          logit[j] = d * scale;
          max_logit = std::max(max_logit, logit[j]);
          max_abs_logit = std::max(max_abs_logit, std::abs(logit[j]));
        }
        double denom = 0;
        for (int64_t j = 0; j <= pos; ++j) denom += visible[j] ? std::exp(logit[j] - max_logit) : 0;
        for (int64_t e = 0; e < dim; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= pos; ++j) {
            if (!visible[j]) continue;
            o += weight16(std::exp(logit[j] - max_logit)) / denom * v_seen[s][j * vec + g * dim + e];
            max_v = std::max(max_v, std::abs(double{v_seen[s][j * vec + g * dim + e]}));
          }
          // Each logit carries ~dim/4 + 8 roundings of its products (|logit| scale), exp adds a
          // few ulps, the running sums up to 2 per key relative to their total: the output,
          // a convex combination of V, is off by at most ~(dim/4 + 8) * eps * max|logit| * max|V|
          // plus a few eps * max|V| per accumulation. 64x eps covers the combination terms.
          // 16-bit weights: the CPU's and the reference's roundings of a weight (u16 relative
          // each, u16 = 2^-11 for FP16, 2^-8 for BF16) lie 2 u16 apart, and FP16's subnormal
          // spacing adds 2^-25 absolute per weight on each side (the weights sum to >= 1).
          const double u16 = f16 ? 0x1p-11 : 0x1p-8;
          const double tol = ((dim / 4.0 + 8) * max_abs_logit + 64) * kEps32 * max_v * 4 +
                             (rounded ? (2 * u16 + (f16 ? 2 * 0x1p-25 * (pos + 1) : 0.0)) * max_v : 0.0);
          EXPECT_NEAR(out[(t * q_heads + h) * dim + e], o, tol)
              << "position " << pos << " head " << h << (sparse ? " sparse" : " dense")
              << (rounded ? " 16-bit operands" : "");
        }
      }
    }
    }
  }
}

// 16-bit operands round the query and each weight, not only within the bounds above: key 0 has
// logit 0 and V = 0, key 1 (K = e_0, V = 1 before the cache's rounding: k and v as stored) the
// logit q~_0 k < 0, so the running maximum is the final one and every output is exactly
// RN16(w) v / (1 + w) with w = exp(q~_0 k), in float.
TEST_P(CpuPagedAttention, SixteenBitOperandsRoundTheQueryAndEachWeight) {
  const int64_t dim = 32;
  const bool f16 = f16_operands(GetParam());
  const auto layout = kvcache::kv_page_layout(GetParam(), 1, dim);
  std::vector<uint8_t> pool(layout.page_bytes, 0xFF);
  std::vector<float> k(2 * dim, 0.0f), v(2 * dim, 0.0f), q(dim, 0.0f);
  k[dim] = 1.0f;
  std::fill(v.begin() + dim, v.end(), 1.0f);
  q[0] = -0.3f;  // no 16-bit value
  q[1] = 1.7f;   // the head's largest magnitude sets FP16's shift
  const int64_t slots[] = {0, 1};
  cpu::cache_insert({.layout = &layout, .pool = pool.data(), .num_pages = 1, .k = k.data(), .v = v.data(),
                     .slots = slots, .tokens = 2, .scales = {}});
  const int32_t position = 1, seq = 0, table = 0;
  std::vector<float> out(dim, NAN), out_fp32(dim, NAN);
  for (AttentionOperands operands : {AttentionOperands::k16Bit, AttentionOperands::kFP32}) {
    cpu::paged_attention({.ctx = {&position, &seq, &table, 1, 1, 1}, .layout = &layout, .pool = pool.data(),
                          .num_pages = 1, .scales = {}, .q = q.data(),
                          .out = operands == AttentionOperands::k16Bit ? out.data() : out_fp32.data(),
                          .q_heads = 1, .kv_heads = 1, .head_dim = dim, .softmax_scale = 1.0f,
                          .operands = operands});
  }
  std::vector<float> k_seen(2 * dim), v_seen(2 * dim);
  kvcache::read_page(layout, pool.data(), 2, k_seen.data(), v_seen.data());
  const float q0 = rounded_head(q.data(), dim, f16)[0];
  ASSERT_NE(q0, q[0]);
  const float w = std::exp(q0 * k_seen[dim]), w16 = round_to_16bit(w, f16);
  ASSERT_NE(w16, w);
  const float w_fp32 = std::exp(q[0] * k_seen[dim]);
  for (int64_t e = 0; e < dim; ++e) {
    ASSERT_EQ(v_seen[e], 0.0f);
    EXPECT_EQ(out[e], w16 * v_seen[dim + e] / (1.0f + w)) << "dim " << e;
    // Without the roundings: w v / (1 + w) of the given query.
    EXPECT_FLOAT_EQ(out_fp32[e], w_fp32 * v_seen[dim + e] / (1.0f + w_fp32)) << "dim " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPageFormat, CpuPagedAttention,
                         ::testing::Values(PageDType::kFP32, PageDType::kBF16, PageDType::kFP8,
                                           PageDType::kNVFP4),
                         [](const auto& info) { return std::string(kvcache::page_dtype_name(info.param)); });

}  // namespace
}  // namespace fp4
