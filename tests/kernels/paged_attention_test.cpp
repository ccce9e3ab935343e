// The CUDA paged attention kernels against fp4::cpu::paged_attention run on the same pages:
// every page format, dense and sparse, head_dim 32, 64 (decode) and 128, 2 and 16 query heads per KV head,
// one batch of sequences of 1, 127, 128, 2048, 2049, 5000 and 300 tokens (the last one a
// prefill chunk querying every position) behind shuffled page tables. Each launch runs on
// poisoned outputs and workspace (NaN bytes), with every kernel and several split counts; the
// prefill kernel also on prefill chunks with selections in any order.
//
// Two kinds of data. Gaussian Q, K, V check the softmax numerics against a derived rounding
// bound. Q = 0 with small-integer V makes every weight exactly 1, so both sides compute the
// mean of exactly the visible V rows; a key read or dropped by mistake moves that mean far
// beyond the few ulps the two sides may differ by. Gaussian cases run with both operand
// precisions (AttentionOperands): with 16-bit operands the CPU reference rounds as the kernels do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.h"
#include "formats/nvfp4.h"
#include "tests/support/paged_batch.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using kvcache::PageDType;
using Choice = cuda::AttentionKernelChoice;
constexpr double kU = 0x1p-24;  // FP32 unit roundoff
constexpr int64_t kTopk = 16;

using Batch = testing::PagedBatch;

// Per (KV head, token): ascending block ids, the local block always, -1 padding at the tail.
std::vector<int32_t> random_selection(const Batch& b, int64_t kv_heads, std::mt19937_64& rng) {
  std::vector<int32_t> selected(kv_heads * b.tokens() * kTopk, -1);
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t t = 0; t < b.tokens(); ++t) {
      const int32_t blocks = b.positions[t] / 128 + 1;
      std::vector<int32_t> ids(blocks - 1);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const int64_t most = std::min<int64_t>(blocks - 1, kTopk - 1);
      const int64_t keep = rng() % 2 ? most : static_cast<int64_t>(rng() % (most + 1));
      ids.resize(keep);
      ids.push_back(blocks - 1);
      std::sort(ids.begin(), ids.end());
      std::copy(ids.begin(), ids.end(), &selected[(g * b.tokens() + t) * kTopk]);
    }
  }
  return selected;
}

// The prefill kernel takes selections in any order, as the reference does, duplicates counted
// twice: each token's list shuffled, and about one token in 8 naming one block twice.
void shuffle_with_duplicates(std::vector<int32_t>& selected, std::mt19937_64& rng) {
  for (size_t row = 0; row < selected.size(); row += kTopk) {
    int32_t* list = &selected[row];
    const int64_t used = std::count_if(list, list + kTopk, [](int32_t b) { return b >= 0; });
    if (used > 0 && used < kTopk && rng() % 8 == 0) list[used] = list[rng() % used];
    std::shuffle(list, list + kTopk, rng);
  }
}

enum class Data { kGaussian, kExactMeans };

struct Case {
  PageDType dtype;
  bool sparse;
  int64_t group, head_dim;
  Data data;
  AttentionOperands operands = AttentionOperands::kFP32;
};

// The step's sequences as (context, query tokens) pairs, and the kernels to run on them.
struct Step {
  std::vector<std::pair<int32_t, int32_t>> seqs;
  bool decode_kernels = true;   // the CUDA-core and tensor-core decode kernels, several splits
  bool prefill_kernel = false;  // forced, on any page format it takes
  bool shuffled_selection = false;
};

// 8,400 tokens: 66 blocks, more than one CTA resolves at once (64) when a split takes them all.
const Step kDecodeStep{{{1, 1}, {127, 3}, {128, 3}, {2048, 2}, {2049, 3}, {5000, 2}, {8400, 1}, {300, 300}},
                       true, true, false};

// Small integers (every 16-value block holds a +-6, so NVFP4 block scales are exact) for V.
std::vector<float> small_integers(size_t n, std::mt19937_64& rng) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(rng() % 13) - 6);
  for (size_t i = 0; i < n; i += 16) v[i + rng() % 16] = rng() % 2 ? 6.0f : -6.0f;
  return v;
}

void run_case(const Case& c, std::mt19937_64& rng, const Step& step = kDecodeStep) {
  const bool exact = c.data == Data::kExactMeans;
  const bool rounded = c.operands == AttentionOperands::k16Bit;
  SCOPED_TRACE(fmt::format("{} {} group {} head_dim {} {}{}", kvcache::page_dtype_name(c.dtype),
                           c.sparse ? "sparse" : "dense", c.group, c.head_dim, exact ? "exact means" : "gaussian",
                           rounded ? ", 16-bit operands" : ""));
  const int64_t kv_heads = c.group == 16 ? 2 : 4, q_heads = kv_heads * c.group, d = c.head_dim;
  const int64_t vec = kv_heads * d;
  Batch b(step.seqs, rng);
  const auto layout = kvcache::kv_page_layout(c.dtype, static_cast<int>(kv_heads), static_cast<int>(d));

  // Pages: unwritten slots stay NaN bytes, so a kernel reading past a token's position shows.
  std::vector<uint8_t> pool(b.num_pages * layout.page_bytes, 0xFF);
  // Exact means need exact values: integers / 0.5 are E4M3 numbers, and with g = 2 a block
  // whose amax is 6 gets the exact block scale 0.5.
  kvcache::KvScales scales;
  if (c.dtype == PageDType::kFP8) {
    scales = exact ? kvcache::KvScales{0.5f, 0.5f} : kvcache::KvScales{4.5f / 448, 5.0f / 448};
  }
  if (c.dtype == PageDType::kNVFP4) {
    scales = exact ? kvcache::KvScales{2.0f, 2.0f}
                   : kvcache::KvScales{nvfp4_global_scale_for_amax(5.0f), 1.0f};
  }
  std::vector<std::vector<float>> k_seen(b.num_seqs), v_seen(b.num_seqs);
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t n = b.context[s];
    const auto k = testing::random_floats(n * vec, testing::Distribution::kGaussian, rng);
    const auto v = exact ? small_integers(n * vec, rng)
                         : testing::random_floats(n * vec, testing::Distribution::kGaussian, rng);
    std::vector<int64_t> slots(n);
    for (int64_t j = 0; j < n; ++j) slots[j] = b.slot(s, j);
    cpu::cache_insert({.layout = &layout, .pool = pool.data(), .num_pages = b.num_pages, .k = k.data(),
                       .v = v.data(), .slots = slots.data(), .tokens = n, .scales = scales});
    k_seen[s].resize(n * vec);
    v_seen[s].resize(n * vec);
    for (int64_t j = 0; j < n; j += 128) {
      kvcache::read_page(layout, &pool[slots[j] / 128 * layout.page_bytes],
                         static_cast<int>(std::min<int64_t>(128, n - j)), &k_seen[s][j * vec],
                         &v_seen[s][j * vec], scales);
    }
  }
  std::vector<float> q = testing::random_floats(b.tokens() * q_heads * d, testing::Distribution::kGaussian, rng);
  for (float& x : q) x = exact ? 0.0f : 2.0f * x;  // logits of a few units: peaked softmaxes
  // Heads of different magnitudes in one group (the FP16 tiles scale each head into range):
  // factors 2^-8 .. 2^2, and per token one head of zeros and one of subnormals.
  std::uniform_real_distribution<float> log2_factor(-8.0f, 2.0f);
  for (int64_t row = 0; !exact && row < b.tokens() * q_heads; ++row) {
    const int64_t h = row % q_heads;
    const float factor = h == 0 ? 0.0f : h == 1 ? 1e-39f : std::exp2(log2_factor(rng));
    for (int64_t e = 0; e < d; ++e) q[row * d + e] *= factor;
  }
  auto selected = random_selection(b, kv_heads, rng);
  if (step.shuffled_selection) shuffle_with_duplicates(selected, rng);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));

  PagedAttentionParams p{.ctx = {b.positions.data(), b.seq_of_token.data(), b.tables.data(), b.tokens(),
                                 b.num_seqs, b.max_blocks},
                         .layout = &layout, .pool = pool.data(), .num_pages = b.num_pages,
                         .scales = scales, .q = q.data(), .out = nullptr, .q_heads = q_heads,
                         .kv_heads = kv_heads, .head_dim = d, .softmax_scale = softmax_scale,
                         .selected = c.sparse ? selected.data() : nullptr,
                         .topk = c.sparse ? kTopk : 0, .operands = c.operands};
  std::vector<float> want(b.tokens() * q_heads * d);
  p.out = want.data();
  cpu::paged_attention(p);

  // Tolerance per (token, KV head), from the keys it sees: n of them, |V| <= vmax, and
  // A = softmax_scale * sum_i |q_i k_i| <= amax over its heads (|logit| <= A).
  std::vector<double> tol(b.tokens() * kv_heads);
  for (int64_t t = 0; t < b.tokens(); ++t) {
    const int64_t s = b.seq_of_token[t], pos = b.positions[t];
    for (int64_t g = 0; g < kv_heads; ++g) {
      std::vector<int> visible(pos + 1, c.sparse ? 0 : 1);  // times key j is read
      for (int64_t i = 0; c.sparse && i < kTopk; ++i) {
        const int32_t blk = selected[(g * b.tokens() + t) * kTopk + i];
        for (int64_t j = blk * 128; blk >= 0 && j <= std::min<int64_t>(pos, blk * 128 + 127); ++j) ++visible[j];
      }
      double n = 0, amax = 0, vmax = 0;
      for (int64_t j = 0; j <= pos; ++j) {
        if (visible[j] == 0) continue;
        n += visible[j];
        const float* kj = &k_seen[s][j * vec + g * d];
        for (int64_t e = 0; e < d; ++e) vmax = std::max(vmax, double{std::abs(v_seen[s][j * vec + g * d + e])});
        for (int64_t h = g * c.group; h < (g + 1) * c.group; ++h) {
          double a = 0;
          for (int64_t e = 0; e < d; ++e) a += std::abs(double{q[(t * q_heads + h) * d + e]} * kj[e]);
          amax = std::max(amax, a * softmax_scale);
        }
      }
      // Exact means: every weight is exactly 1 on both sides and the sums of V are exact
      // (integers or halves below 2^24), so only the normalization differs: o = RN(sum / n) on
      // the CPU, RN(sum * RN(v_scale / n)) per split on the GPU (<= 2 ulp), and the merge's
      // weights 2^(lse_s - max) with lse = log2f(l_s) (|lse| < 13, log2f 1 ulp, exp2f 2 ulp)
      // off by <= 2 * (13 * 2 + 3) u = 58 u relatively, which moves a mean of splits by at
      // most 2 * 58 u * 2 vmax. 256 u vmax covers both.
      //
      // Gaussian: logits carry a rounding error delta <= kappa u A with kappa = D/4 + 4 on the
      // CPU (four partial sums of D/4 products, the scale) and D/4 + 76 on the GPU (the same
      // for FMAs; for tensor cores 2^-18 = 64 u from Q's BF16 hi/lo split plus two roundings
      // per 16-product MMA step; FP16's split, for FP8 and NVFP4 pages, leaves 2^-22 = 4 u); exp
      // and exp2 add (4 + 2A) u per weight on each side. A relative error e of the weights moves
      // a convex combination of V by <= 2e * 2 vmax: 4 (D/2 + 80) u A vmax from the logits,
      // 8 (4 + 2A) u vmax from exp. Accumulating n weights and n weighted rows (with rescales)
      // costs each side <= (4n + 50) u vmax, the tensor cores' split of P 64 u vmax more, and
      // with FP16 also its subnormal spacing: 2^-25 = u/2 per weight, n u/2 vmax over n keys
      // (the weights sum to at least 1). Altogether vmax u ((2D + 336) A + 8.5n + 196).
      //
      // 16-bit operands: both sides multiply the same rounded Q (a bound for Q's split holds a
      // fortiori), and round each weight, u16 relative (2^-11 = 2^13 u for FP16, 2^-8 = 2^16 u
      // for BF16): weights that differed by e before differ by e + 2 u16 after, which moves the
      // output by <= 2 u16 vmax more, and FP16's subnormal spacing 2^-25 per weight on each
      // side n u vmax more.
      const bool f16 = c.dtype == PageDType::kFP8 || c.dtype == PageDType::kNVFP4;
      const double rounding = rounded ? 2 * (f16 ? 0x1p13 : 0x1p16) + (f16 ? n : 0.0) : 0.0;
      tol[t * kv_heads + g] = exact ? 256 * kU * vmax
                                    : vmax * kU * ((2.0 * d + 336) * amax + 8.5 * n + 196 + rounding);
    }
  }

  auto d_pos = cuda::DeviceBuffer::copy_of(b.positions), d_seq = cuda::DeviceBuffer::copy_of(b.seq_of_token), d_tab = cuda::DeviceBuffer::copy_of(b.tables);
  auto d_sel = cuda::DeviceBuffer::copy_of(selected), d_q = cuda::DeviceBuffer::copy_of(q), d_pool = cuda::DeviceBuffer::copy_of(pool);
  cuda::DeviceBuffer d_out(want.size() * sizeof(float));
  PagedAttentionParams pd = p;
  pd.ctx = {d_pos.as<int32_t>(), d_seq.as<int32_t>(), d_tab.as<int32_t>(), b.tokens(), b.num_seqs, b.max_blocks};
  pd.selected = c.sparse ? d_sel.as<int32_t>() : nullptr;
  pd.pool = d_pool.as<uint8_t>();
  pd.q = d_q.as<float>();
  pd.out = d_out.as<float>();

  std::vector<float> got(want.size());
  auto check = [&](const std::string& what, const cuda::PagedAttentionOptions* options) {
    SCOPED_TRACE(what);
    d_out.fill(0xFF);
    if (options == nullptr) {
      cuda::paged_attention(pd, nullptr);
    } else {
      const size_t workspace_bytes = cuda::paged_attention_workspace_bytes(pd, *options);
      // The split count the launch takes: a forced count at most as asked (capped at the blocks
      // or selection slots), and a workspace exactly when it splits.
      const int splits = cuda::paged_attention_splits(pd, *options);
      EXPECT_GE(splits, 1);
      if (options->splits > 0) EXPECT_LE(splits, options->splits);
      EXPECT_EQ(splits > 1, workspace_bytes > 0);
      cuda::DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 16));
      workspace.fill(0xFF);
      cuda::paged_attention(pd, workspace.data(), workspace.bytes(), nullptr, *options);
      FP4_CUDA_CHECK(cudaDeviceSynchronize());  // before the workspace is freed
    }
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    d_out.download(got.data(), got.size() * sizeof(float));
    int failures = 0;
    double worst = 0;  // the largest error as a share of its bound
    for (int64_t t = 0; t < b.tokens(); ++t) {
      for (int64_t h = 0; h < q_heads; ++h) {
        const double bound = tol[t * kv_heads + h / c.group];
        for (int64_t e = 0; e < d; ++e) {
          const size_t i = (t * q_heads + h) * d + e;
          const double error = std::abs(double{got[i]} - want[i]);
          if (bound > 0) worst = std::max(worst, error / bound);
          if (error <= bound) continue;  // NaN fails too
          ADD_FAILURE() << "token " << t << " (position " << b.positions[t] << ") head " << h << " dim "
                        << e << ": GPU " << got[i] << ", CPU " << want[i] << ", tolerance " << bound;
          if (++failures == 5) return;
        }
      }
    }
    // 16-bit operands have the loosest bound: how much of it the kernels use shows in the log.
    if (rounded) {
      std::printf("[  CHECKED ] %s %s group %lld head_dim %lld, 16-bit operands, %s: worst error %.3g of its bound\n",
                  std::string(kvcache::page_dtype_name(c.dtype)).c_str(), c.sparse ? "sparse" : "dense",
                  static_cast<long long>(c.group), static_cast<long long>(d), what.c_str(), worst);
    }
  };
  const bool tensor_cores = c.dtype != PageDType::kFP32 && d >= 32;
  if (step.decode_kernels) {
    std::vector<Choice> kernels = {Choice::kCudaCore};
    if (tensor_cores) kernels.push_back(Choice::kTensorCore);
    for (Choice kernel : kernels) {
      // 37 asks for more splits than there are items where a step has fewer than 37 blocks or
      // selections (all of them then), and makes 33 of two blocks at 8,400 tokens: the merge
      // takes the splits' lse 32 at a time and their outputs 4 at a time, remainders included.
      for (int splits : {0, 1, 3, 37}) {
        const cuda::PagedAttentionOptions options{kernel, splits};
        check(fmt::format("{} kernel, splits {}", kernel == Choice::kCudaCore ? "CUDA-core" : "tensor-core",
                          splits), &options);
      }
    }
  }
  if (step.prefill_kernel && tensor_cores) {
    const cuda::PagedAttentionOptions options{Choice::kPrefill, 0};
    check("prefill kernel", &options);
  }
  check("default kernel and splits, workspace from cudaMallocAsync", nullptr);
}

class PagedAttentionKernels : public ::testing::TestWithParam<PageDType> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible; kernel tests need one";
  }
};

TEST_P(PagedAttentionKernels, MatchCpuReferenceOnTheSamePages) {
  auto rng = testing::seeded_rng(40 + static_cast<int>(GetParam()));
  for (Data data : {Data::kGaussian, Data::kExactMeans}) {
    for (bool sparse : {false, true}) {
      for (int64_t group : {2, 16}) {
        // 64 too: the tensor-core kernel reads FP8 and NVFP4 operands in runs that depend on it.
        for (int64_t head_dim : {32, 64, 128}) run_case({GetParam(), sparse, group, head_dim, data}, rng);
        // 16-bit operands on Gaussian data (exact means weigh every key 1, which no rounding moves).
        for (int64_t head_dim : {16, 32, 64, 128}) {
          if (data == Data::kGaussian && (head_dim != 16 || GetParam() != PageDType::kNVFP4)) {
            run_case({GetParam(), sparse, group, head_dim, data, AttentionOperands::k16Bit}, rng);
          }
        }
        // Small heads (stories260K's 8, flattened pages) on the CUDA-core kernel, where a head's
        // row is whole 16-byte vectors.
        if (GetParam() != PageDType::kNVFP4) run_case({GetParam(), sparse, group, 16, data}, rng);
        if (GetParam() == PageDType::kFP32 || GetParam() == PageDType::kBF16) {
          run_case({GetParam(), sparse, group, 8, data}, rng);
        }
      }
    }
  }
}

// A step small enough for compute-sanitizer's memcheck and racecheck to take in seconds, at the
// model's geometry (16 query heads a KV head, head_dim 128), sparse, both operand kinds: a
// sequence of one token, one ending one short of a block, one past a block boundary and one
// of more blocks than a CTA resolves at once.
TEST_P(PagedAttentionKernels, SanitizerSizedSparseStep) {
  auto rng = testing::seeded_rng(50 + static_cast<int>(GetParam()));
  const Step step{{{1, 1}, {127, 1}, {2049, 2}, {8400, 1}}, true, true, false};
  for (AttentionOperands operands : {AttentionOperands::kFP32, AttentionOperands::k16Bit}) {
    run_case({GetParam(), true, 16, 128, Data::kGaussian, operands}, rng, step);
  }
  run_case({GetParam(), true, 16, 128, Data::kExactMeans}, rng, step);
}

// Prefill chunks: a whole prompt of 700 tokens, a chunk of 301 tokens ending at 2,100 (it starts
// mid-block and ends mid-unit), a few queries of a short sequence and a single token, so the
// prefill kernel's 4-token CTAs straddle sequences and blocks; the selections in any order with
// duplicates.
// The prefill kernel takes BF16, FP8 and NVFP4 pages (the launcher's refusal of FP32 is tested
// below).
class PagedAttentionPrefillKernels : public PagedAttentionKernels {};

TEST_P(PagedAttentionPrefillKernels, PrefillChunksMatchCpuReference) {
  auto rng = testing::seeded_rng(60 + static_cast<int>(GetParam()));
  const Step step{{{700, 700}, {2100, 301}, {129, 5}, {1, 1}}, false, true, true};
  for (Data data : {Data::kGaussian, Data::kExactMeans}) {
    for (bool sparse : {false, true}) {
      for (int64_t group : {2, 16}) {
        for (int64_t head_dim : {32, 128}) run_case({GetParam(), sparse, group, head_dim, data}, rng, step);
        if (data == Data::kGaussian) {
          run_case({GetParam(), sparse, group, 128, data, AttentionOperands::k16Bit}, rng, step);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPageFormats, PagedAttentionKernels,
                         ::testing::Values(PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4),
                         [](const auto& info) { return std::string(kvcache::page_dtype_name(info.param)); });
INSTANTIATE_TEST_SUITE_P(TensorCorePageFormats, PagedAttentionPrefillKernels,
                         ::testing::Values(PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4),
                         [](const auto& info) { return std::string(kvcache::page_dtype_name(info.param)); });


// Device-resident indices the CPU reference would reject make exactly the affected (token, KV
// head) rows NaN; every other row is bit for bit what the same launch gives on valid indices.
TEST_F(PagedAttentionKernels, InvalidDeviceIndicesGiveNanRowsOnly) {
  auto rng = testing::seeded_rng(48);
  const int64_t kv_heads = 2, group = 2, q_heads = 4, d = 32, vec = kv_heads * d;
  Batch b({{300, 2}, {200, 2}, {129, 1}}, rng);
  const auto layout = kvcache::kv_page_layout(PageDType::kBF16, 2, 32);
  std::vector<uint8_t> pool(b.num_pages * layout.page_bytes, 0xFF);
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const auto k = testing::random_floats(b.context[s] * vec, testing::Distribution::kGaussian, rng);
    std::vector<int64_t> slots(b.context[s]);
    for (int64_t j = 0; j < b.context[s]; ++j) slots[j] = b.slot(s, j);
    cpu::cache_insert({.layout = &layout, .pool = pool.data(), .num_pages = b.num_pages, .k = k.data(),
                       .v = k.data(), .slots = slots.data(), .tokens = b.context[s], .scales = {}});
  }
  const auto q = testing::random_floats(b.tokens() * q_heads * d, testing::Distribution::kGaussian, rng);
  const auto selected = random_selection(b, kv_heads, rng);
  auto d_pos = cuda::DeviceBuffer::copy_of(b.positions), d_seq = cuda::DeviceBuffer::copy_of(b.seq_of_token), d_tab = cuda::DeviceBuffer::copy_of(b.tables);
  auto d_sel = cuda::DeviceBuffer::copy_of(selected), d_q = cuda::DeviceBuffer::copy_of(q), d_pool = cuda::DeviceBuffer::copy_of(pool);
  const int64_t rows = b.tokens() * q_heads;
  cuda::DeviceBuffer d_out(rows * d * sizeof(float));
  PagedAttentionParams p{.ctx = {d_pos.as<int32_t>(), d_seq.as<int32_t>(), d_tab.as<int32_t>(), b.tokens(),
                                 b.num_seqs, b.max_blocks},
                         .layout = &layout, .pool = d_pool.as<uint8_t>(), .num_pages = b.num_pages,
                         .scales = {}, .q = d_q.as<float>(), .out = d_out.as<float>(), .q_heads = q_heads,
                         .kv_heads = kv_heads, .head_dim = d, .softmax_scale = 0.125f};
  auto run = [&](bool sparse, const cuda::PagedAttentionOptions& options) {
    p.selected = sparse ? d_sel.as<int32_t>() : nullptr;
    p.topk = sparse ? kTopk : 0;
    cuda::DeviceBuffer workspace(std::max<size_t>(cuda::paged_attention_workspace_bytes(p, options), 16));
    d_out.fill(0xFF);
    cuda::paged_attention(p, workspace.data(), workspace.bytes(), nullptr, options);
    std::vector<float> out(rows * d);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    d_out.download(out.data(), out.size() * sizeof(float));
    return out;
  };
  // Token 0 selects, for KV head 1, a block after its own; token 1 names a sequence that does
  // not exist; in the dense run, the last sequence's first block maps past the pool.
  const int64_t t_sel = 0, t_seq = 1, s_page = b.seq_of_token.back();
  std::vector<int32_t> bad_selected = selected, bad_seq = b.seq_of_token, bad_tables = b.tables;
  bad_selected[(1 * b.tokens() + t_sel) * kTopk] = b.positions[t_sel] / 128 + 1;
  bad_seq[t_seq] = static_cast<int32_t>(b.num_seqs);
  bad_tables[s_page * b.max_blocks] = static_cast<int32_t>(b.num_pages);
  for (Choice kernel : {Choice::kCudaCore, Choice::kTensorCore, Choice::kPrefill}) {
    for (int splits : {1, 3}) {
      if (kernel == Choice::kPrefill && splits != 1) continue;  // no split-K
      for (bool sparse : {false, true}) {
        SCOPED_TRACE(fmt::format("kernel {} splits {} {}", static_cast<int>(kernel), splits, sparse ? "sparse" : "dense"));
        const cuda::PagedAttentionOptions options{kernel, splits};
        d_sel.upload(selected.data(), selected.size() * 4);
        d_seq.upload(b.seq_of_token.data(), b.seq_of_token.size() * 4);
        d_tab.upload(b.tables.data(), b.tables.size() * 4);
        const auto good = run(sparse, options);
        d_sel.upload(bad_selected.data(), bad_selected.size() * 4);
        d_seq.upload(bad_seq.data(), bad_seq.size() * 4);
        if (!sparse) d_tab.upload(bad_tables.data(), bad_tables.size() * 4);
        const auto bad = run(sparse, options);
        for (int64_t t = 0; t < b.tokens(); ++t) {
          for (int64_t h = 0; h < q_heads; ++h) {
            const bool broken = t == t_seq || (sparse && t == t_sel && h / group == 1) ||
                                (!sparse && b.seq_of_token[t] == s_page);
            for (int64_t e = 0; e < d; ++e) {
              const size_t i = (t * q_heads + h) * d + e;
              if (broken) {
                ASSERT_TRUE(std::isnan(bad[i])) << "token " << t << " head " << h;
              } else {
                ASSERT_FALSE(std::isnan(good[i])) << "token " << t << " head " << h;
                ASSERT_EQ(std::memcmp(&bad[i], &good[i], 4), 0) << "token " << t << " head " << h << " dim " << e;
              }
            }
          }
        }
      }
    }
  }
}

// What the launcher refuses, before any CUDA call: this runs without a GPU too.
TEST(PagedAttentionLauncher, RefusesShapesAndArgumentsTheKernelsDoNotTake) {
  alignas(16) static float buffer[256] = {};
  static int32_t ints[4] = {};
  const auto bf16 = kvcache::kv_page_layout(PageDType::kBF16, 2, 32);
  auto params = [&](const kvcache::PageLayout& layout, int64_t q_heads) {
    return PagedAttentionParams{.ctx = {ints, ints, ints, 1, 1, 1}, .layout = &layout,
                                .pool = reinterpret_cast<const uint8_t*>(buffer), .num_pages = 1,
                                .scales = {}, .q = buffer, .out = buffer, .q_heads = q_heads,
                                .kv_heads = layout.heads, .head_dim = layout.head_dim,
                                .softmax_scale = 0.125f};
  };
  auto refused = [&](const PagedAttentionParams& p, const cuda::PagedAttentionOptions& options = {}) {
    EXPECT_THROW(cuda::paged_attention(p, nullptr, 0, nullptr, options), Error);
    EXPECT_THROW((void)cuda::paged_attention_workspace_bytes(p, options), Error);
    EXPECT_THROW((void)cuda::paged_attention_splits(p, options), Error);
  };
  const auto dim48 = kvcache::kv_page_layout(PageDType::kBF16, 2, 48);
  refused(params(dim48, 4));                                 // head_dim 48
  refused(params(bf16, 64));                                 // 32 query heads per KV head
  refused(params(bf16, 5));                                  // heads do not split
  const auto short_pages = kvcache::kv_page_layout(PageDType::kBF16, 2, 32, 64);
  refused(params(short_pages, 4));                           // 64-token pages
  const auto index_pages = kvcache::index_page_layout(PageDType::kBF16, 32);
  refused(params(index_pages, 1));                           // no V
  auto p = params(bf16, 4);
  p.kv_heads = 1;
  p.q_heads = 2;
  refused(p);                                                // layout heads != kv_heads
  p = params(bf16, 4);
  p.q = buffer + 1;
  refused(p);                                                // misaligned q
  p = params(bf16, 4);
  p.selected = ints;
  p.topk = 0;
  refused(p);                                                // a selection of nothing
  const auto fp4_pages = kvcache::kv_page_layout(PageDType::kNVFP4, 2, 32);
  p = params(fp4_pages, 4);
  p.scales.v = 0.0f;
  refused(p);                                                // zero global scale
  const auto huge_pages = kvcache::kv_page_layout(PageDType::kFP32, 16400, 128);
  ASSERT_GT(huge_pages.page_bytes, int64_t{1} << 31);
  try {  // pages over 2 GiB: the kernels address within a page in 32 bits
    (void)cuda::paged_attention_workspace_bytes(params(huge_pages, 16400), {});
    ADD_FAILURE() << "a page of " << huge_pages.page_bytes << " bytes was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("under 2 GiB"), std::string::npos) << e.what();
  }
  const auto fp32_pages = kvcache::kv_page_layout(PageDType::kFP32, 2, 32);
  refused(params(fp32_pages, 4), {cuda::AttentionKernelChoice::kTensorCore, 1});
  refused(params(fp32_pages, 4), {cuda::AttentionKernelChoice::kPrefill, 1});
  refused(params(bf16, 4), {cuda::AttentionKernelChoice::kPrefill, 2});  // no split-K
  p = params(bf16, 4);
  p.selected = ints;
  p.topk = 65;
  refused(p, {cuda::AttentionKernelChoice::kPrefill, 1});     // a selection longer than it sorts
}

}  // namespace
}  // namespace fp4
