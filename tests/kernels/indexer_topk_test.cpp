// The CUDA MSA indexer against fp4::cpu::indexer_topk on the same pages, with every way of
// scoring (exact on CUDA cores; FP16/BF16 tensor cores; FP8 tensor cores) and the FP32 and FP8
// queries: several sequences per step with shuffled page tables, contexts around the 128-token
// page and the 16-block (2048-token) dense limit, every index page format, init blocks 0 and 1;
// every run's block scores are checked against exact ones within each path's derived bound. Small-integer inputs make ties common, so the tie
// rule (lower block id) is checked exactly wherever both sides' scores are exact. Gaussian
// inputs may differ only at a near-tie of the selection boundary, within a float tolerance
// derived for each path (below); each near-tie is counted and printed. The exact path repeats
// the reference's summation order, so it is expected to show none. Gaussian keys include a
// few NaNs, whose keys the block maximum must skip.
// Outputs are poisoned with two patterns (0xFF is also the -1 padding, 0x5A is not), and the
// score workspace with NaN, so an entry the kernels fail to write cannot match by luck.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/indexer_topk.h"
#include "formats/e4m3_query.h"
#include "kvcache/page_io.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu_test.h"
#include "tests/support/paged_batch.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using kvcache::PageDType;
constexpr double kEps32 = 0x1p-24;
constexpr int kPage = kvcache::kPageTokens;

using Batch = testing::PagedBatch;

// kOnes: every key and query element 1, so every block scores the same.
enum class Values { kSmallIntegers, kGaussian, kOnes };

std::vector<float> make_values(size_t n, Values kind, std::mt19937_64& rng) {
  if (kind == Values::kGaussian) return testing::random_floats(n, testing::Distribution::kGaussian, rng);
  if (kind == Values::kOnes) return std::vector<float>(n, 1.0f);
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

struct Geometry {
  int64_t heads, dim, topk, init, local;
};

std::string describe(PageDType dtype, const Geometry& g, Values kind) {
  return std::string(kvcache::page_dtype_name(dtype)) + " heads " + std::to_string(g.heads) + " dim " +
         std::to_string(g.dim) + " top-" + std::to_string(g.topk) + " init " + std::to_string(g.init) +
         " local " + std::to_string(g.local) +
         (kind == Values::kGaussian ? " gaussian" : kind == Values::kOnes ? " ones" : " integers");
}

// One step's inputs on the host and the device.
struct Case {
  Batch batch;
  Geometry geo;
  kvcache::PageLayout layout;
  float scale = 1.0f;
  std::vector<uint8_t> pool;
  std::vector<float> q;
  IndexQueryFormat query_format = IndexQueryFormat::kFP32;
  std::vector<std::vector<float>> keys_seen;  // per sequence, the dequantized keys [context, dim]
  cuda::DeviceBuffer d_pool, d_q, d_positions, d_seqs, d_tables, d_selected, d_workspace;

  Case(const std::vector<int32_t>& contexts, int queries, PageDType dtype, const Geometry& g, Values kind,
       std::mt19937_64& rng, IndexQueryFormat format = IndexQueryFormat::kFP32)
      : batch(contexts, queries, rng), geo(g), layout(kvcache::index_page_layout(dtype, static_cast<int>(g.dim))),
        query_format(format) {
    if (dtype == PageDType::kFP8) scale = std::exp2(std::uniform_real_distribution<float>(-4.0f, 2.0f)(rng));
    pool.assign(batch.num_pages * layout.page_bytes, 0xFF);  // unwritten slots read as NaN
    keys_seen.resize(batch.num_seqs);
    for (int64_t s = 0; s < batch.num_seqs; ++s) {
      const int64_t n = batch.context[s];
      auto keys = make_values(n * g.dim, kind, rng);
      if (kind == Values::kGaussian) {
        // A few keys hold a NaN (an FP8 NaN code, an NVFP4 NaN block scale): their dot
        // products are NaN, which the block maximum must skip as the CPU's does.
        std::uniform_int_distribution<int64_t> pick(0, n * g.dim - 1);
        for (int64_t i = 0; i < n / 500; ++i) keys[pick(rng)] = NAN;
      }
      std::vector<int64_t> slots(n);
      for (int64_t j = 0; j < n; ++j) slots[j] = batch.slot(s, j);
      cpu::cache_insert({.layout = &layout, .pool = pool.data(), .num_pages = batch.num_pages, .k = keys.data(),
                         .v = nullptr, .slots = slots.data(), .tokens = n, .scales = {scale, 1.0f}});
      keys_seen[s].resize(keys.size());
      for (int64_t j = 0; j < n; j += kPage) {
        kvcache::read_index_page(layout, &pool[slots[j] / kPage * layout.page_bytes],
                                 static_cast<int>(std::min<int64_t>(kPage, n - j)), &keys_seen[s][j * g.dim], scale);
      }
    }
    q = make_values(batch.tokens() * g.heads * g.dim, kind, rng);
    d_pool = cuda::DeviceBuffer::copy_of(pool);
    d_q = cuda::DeviceBuffer::copy_of(q);
    d_positions = cuda::DeviceBuffer::copy_of(batch.positions);
    d_seqs = cuda::DeviceBuffer::copy_of(batch.seq_of_token);
    d_tables = cuda::DeviceBuffer::copy_of(batch.tables);
    d_selected = cuda::DeviceBuffer(selected_count() * sizeof(int32_t));
  }

  size_t selected_count() const { return static_cast<size_t>(geo.heads * batch.tokens() * geo.topk); }

  IndexerTopkParams params(bool device, int32_t* selected) const {
    const PagedContext ctx{device ? d_positions.as<int32_t>() : batch.positions.data(),
                           device ? d_seqs.as<int32_t>() : batch.seq_of_token.data(),
                           device ? d_tables.as<int32_t>() : batch.tables.data(),
                           batch.tokens(), batch.num_seqs, batch.max_blocks};
    return {.ctx = ctx, .layout = &layout, .pool = device ? d_pool.as<uint8_t>() : pool.data(),
            .num_pages = batch.num_pages, .scale = scale, .index_q = device ? d_q.as<float>() : q.data(),
            .heads = geo.heads, .head_dim = geo.dim, .topk = geo.topk, .init_blocks = geo.init,
            .local_blocks = geo.local, .selected = selected, .query_format = query_format};
  }

  // The query the indexer scores: q, or its FP8 rounding read back (formats/e4m3_query.h).
  std::vector<float> scored_query() const {
    std::vector<float> out = q;
    if (query_format == IndexQueryFormat::kFP32) return out;
    const int parts = query_format == IndexQueryFormat::kE4M3x2 ? 2 : 1;
    for (size_t r = 0; r < out.size(); r += geo.dim) e4m3_query_round_row(&out[r], geo.dim, parts);
    return out;
  }

  std::vector<int32_t> run_cpu() const {
    std::vector<int32_t> out(selected_count(), 7);
    cpu::indexer_topk(params(false, out.data()));
    return out;
  }

  // Block scores in double and what bounds their float rounding: per block, the max over its
  // keys of sum_e |q_e k_e| (magnitude) and of max_e |q_e| x sum_e |k_e| (spread).
  void exact_scores(const std::vector<float>& query, int64_t t, int64_t h, std::vector<double>& score,
                    std::vector<double>& magnitude, std::vector<double>& spread) const {
    const int64_t s = batch.seq_of_token[t], pos = batch.positions[t], d = geo.dim;
    const float* qh = &query[(t * geo.heads + h) * d];
    double q_max = 0;
    for (int64_t e = 0; e < d; ++e) q_max = std::max(q_max, double{std::abs(qh[e])});
    score.assign(pos / kPage + 1, -INFINITY);
    magnitude.assign(pos / kPage + 1, 0.0);
    spread.assign(pos / kPage + 1, 0.0);
    for (int64_t j = 0; j <= pos; ++j) {
      double dot = 0, abs_sum = 0, k_sum = 0;
      for (int64_t e = 0; e < d; ++e) {
        const double p = double{qh[e]} * keys_seen[s][j * d + e];
        dot += p;
        abs_sum += std::abs(p);
        k_sum += std::abs(double{keys_seen[s][j * d + e]});
      }
      score[j / kPage] = std::max(score[j / kPage], dot);
      magnitude[j / kPage] = std::max(magnitude[j / kPage], abs_sum);
      spread[j / kPage] = std::max(spread[j / kPage], q_max * k_sum);
    }
  }
};

// How far a path's float block score may be from the exact one: relative * M + absolute * S,
// with M the block's max_j sum_e |q_e k_je| and S its max_j max_e |q_e| sum_e |k_je|. The CPU
// (and the exact kernel) sum head_dim products as four chains of d/4 then 3 adds:
// (d/4 + 3) u M with u = 2^-24. The tensor-core kernel: the query as hi + lo leaves 2^-18 |q_e|
// in BF16 (in FP16, 2^-22 |q_e| + 2^-25 at the scaled query's largest magnitude, over 2^14:
// 2^-39 max|q| absolute); products of BF16 or FP16 values are exact in FP32; each of the d/16
// MMAs adds 16 of them to the FP32 accumulator, which we bound by 2^-21 of what it sums (the
// hardware aligns to the largest term and may truncate: 4 ulp allowed, twice a rounding adder's
// worst); hi + lo and the FP8 scale round once each (2u); powers of two are exact. The FP8
// path (NVFP4 pages, FP8 query) is measured against the rounded query, which the CPU scores
// too: its products of E4M3 query parts and E2M1 codes are exact, and each of its d/16 FP8
// MMAs sums 16 of them from zero. On sm_90a ptxas builds an m16n8k32 E4M3 MMA from two FP16
// k-steps (HMMA.16816.F32, the operands converted to FP16 exactly), so each sums into FP32 as
// the FP16 path's do: 2 x 2^-21 of what it sums (a native FP8 MMA, which keeps 13 fraction
// bits, would need about 2^-8). Then d/16 FFMAs apply the block scales and one add joins hi and
// lo ((d/16 + 1) u). The max over keys keeps the bound.
struct ErrorBound {
  double relative = 0, absolute = 0;
};
enum class Path { kExact, kTensorCores, kFp8 };
ErrorBound score_error_bound(Path path, int64_t d) {
  const double u = kEps32;
  if (path == Path::kExact) return {(d / 4.0 + 3) * u, 0};
  if (path == Path::kFp8) return {(d / 16.0) * 2 * 0x1p-21 + (d / 16.0 + 1) * u, 0};
  return {0x1p-18 + (d / 16.0) * 0x1p-21 + 2 * u, 0x1p-39};
}

// Which path scores a case for the asked-for math: the exact kernel where the tensor cores do
// not take the shapes, the FP8 kernel where asked for NVFP4 pages with an FP8 query.
Path path_of(const Case& c, cuda::IndexerMath math) {
  if (!cuda::indexer_uses_tensor_cores(c.params(true, c.d_selected.as<int32_t>()), {.math = math})) return Path::kExact;
  return math == cuda::IndexerMath::kFp8TensorCores && c.layout.dtype == PageDType::kNVFP4 &&
                 c.query_format != IndexQueryFormat::kFP32
             ? Path::kFp8
             : Path::kTensorCores;
}

// Whether both sides' scores are exact on small-integer inputs, so that ties must agree: the
// CPU's products and sums of small integers (BF16, FP8 with a power-of-two scale) or of NVFP4
// values (at most 6 significant bits, multiples of 2^-9 under 2^6) are exact, and so are the
// tensor cores'. With another FP8 scale the CPU rounds each code x scale and the kernel scales
// the exact sum once, so an exact tie may come out 1 ulp apart on one side only.
bool ties_must_agree(const Case& c, Values kind, Path path) {
  if (kind == Values::kGaussian) return false;
  if (path == Path::kExact || c.layout.dtype != PageDType::kFP8) return true;
  int exponent = 0;
  return std::frexp(c.scale, &exponent) == 0.5f;
}

// Compares the GPU's selection with the CPU's; returns the number of near-tie differences
// (an error where ties must agree).
int compare(const Case& c, const std::vector<int32_t>& got, const std::vector<int32_t>& want, Values kind,
            Path path = Path::kExact) {
  const bool exact = ties_must_agree(c, kind, path);
  const std::vector<float> query = c.scored_query();
  int near_ties = 0;
  const int64_t k = c.geo.topk, tokens = c.batch.tokens();
  for (int64_t h = 0; h < c.geo.heads; ++h) {
    for (int64_t t = 0; t < tokens; ++t) {
      const std::vector<int32_t> g(got.begin() + (h * tokens + t) * k, got.begin() + (h * tokens + t + 1) * k);
      const std::vector<int32_t> w(want.begin() + (h * tokens + t) * k, want.begin() + (h * tokens + t + 1) * k);
      if (g == w) continue;
      const std::string where = "token " + std::to_string(t) + " at position " + std::to_string(c.batch.positions[t]) +
                                " head " + std::to_string(h);
      if (exact) {
        ADD_FAILURE() << where << ": selections differ on exact inputs";
        return near_ties;
      }
      // Same shape as the CPU's: as many ids, ascending and distinct, then -1.
      const auto ids = [](const std::vector<int32_t>& v) {
        return std::vector<int32_t>(v.begin(), std::find(v.begin(), v.end(), -1));
      };
      const std::vector<int32_t> gi = ids(g), wi = ids(w);
      EXPECT_EQ(gi.size(), wi.size()) << where;
      EXPECT_TRUE(std::adjacent_find(gi.begin(), gi.end(), std::greater_equal<int32_t>()) == gi.end()) << where;
      EXPECT_TRUE(std::all_of(g.begin() + gi.size(), g.end(), [](int32_t b) { return b == -1; })) << where;
      std::vector<double> score, magnitude, spread;
      c.exact_scores(query, t, h, score, magnitude, spread);
      std::vector<int32_t> only_cpu, only_gpu;
      std::set_difference(wi.begin(), wi.end(), gi.begin(), gi.end(), std::back_inserter(only_cpu));
      std::set_difference(gi.begin(), gi.end(), wi.begin(), wi.end(), std::back_inserter(only_gpu));
      const ErrorBound cpu = score_error_bound(Path::kExact, c.geo.dim);
      const ErrorBound gpu = score_error_bound(path, c.geo.dim);
      for (int32_t a : only_cpu) {
        for (int32_t b : only_gpu) {
          const auto blocks = static_cast<int32_t>(score.size());
          if (a < 0 || a >= blocks || b < 0 || b >= blocks) {
            ADD_FAILURE() << where << ": blocks " << a << ", " << b << " of " << blocks;
            return near_ties;
          }
          // The CPU ranks a above b and the GPU b above a only if their exact scores are within
          // both sides' bounds (score_error_bound) for each block; the double reference's own
          // error is 2^-29 of that.
          const double tol = (cpu.relative + gpu.relative) * std::max(magnitude[a], magnitude[b]) * 2 +
                             gpu.absolute * std::max(spread[a], spread[b]) * 2;
          EXPECT_LE(std::abs(score[a] - score[b]), tol)
              << where << ": the CPU took block " << a << ", the GPU block " << b;
        }
      }
      ++near_ties;
    }
  }
  return near_ties;
}

// The block scores a run left in the workspace ([tokens, heads, max_blocks]) against the exact
// ones of the scored query, in double: each visible block within its path's bound, -inf where
// every key is NaN. Returns the largest error seen, as a fraction of the block's M.
double check_scores(const Case& c, const std::vector<float>& scores, Path path) {
  const ErrorBound bound = score_error_bound(path, c.geo.dim);
  const std::vector<float> query = c.scored_query();
  std::vector<double> score, magnitude, spread;
  double worst = 0;
  for (int64_t t = 0; t < c.batch.tokens(); ++t) {
    for (int64_t h = 0; h < c.geo.heads; ++h) {
      c.exact_scores(query, t, h, score, magnitude, spread);
      const float* got = &scores[(t * c.geo.heads + h) * c.batch.max_blocks];
      for (size_t b = 0; b < score.size(); ++b) {
        const std::string where = "token " + std::to_string(t) + " head " + std::to_string(h) + " block " + std::to_string(b);
        if (score[b] == -INFINITY) {
          EXPECT_EQ(got[b], -INFINITY) << where;
          continue;
        }
        const double error = std::abs(double{got[b]} - score[b]);
        const double tol = bound.relative * magnitude[b] + bound.absolute * spread[b];
        if (!(error <= tol)) {
          ADD_FAILURE() << where << ": score " << got[b] << ", exact " << score[b] << ", allowed " << tol;
          return worst;
        }
        if (magnitude[b] > 0) worst = std::max(worst, error / magnitude[b]);
      }
    }
  }
  return worst;
}

class IndexerKernel : public testing::GpuTest {
 protected:
  // Both entry points (caller's workspace, stream-ordered allocation), each after its own
  // poison, for each way of scoring; the block scores of the caller's workspace are checked
  // too. Returns, per way, the near-tie count of its last run and the largest score error seen
  // (a fraction of M).
  static constexpr cuda::IndexerMath kMaths[] = {cuda::IndexerMath::kExact, cuda::IndexerMath::kTensorCores,
                                                 cuda::IndexerMath::kFp8TensorCores};
  static constexpr const char* kMathNames[] = {"exact", "tensor cores", "FP8 tensor cores"};
  struct Outcome {
    std::array<int, 3> near_ties{};
    std::array<double, 3> worst{};
    std::string describe() const {
      char line[256];
      std::snprintf(line, sizeof line, "near-tie differences %d / %d / %d, largest score error / M %.2e / %.2e / %.2e "
                    "(exact / tensor cores / FP8 tensor cores)", near_ties[0], near_ties[1], near_ties[2], worst[0],
                    worst[1], worst[2]);
      return line;
    }
  };
  // also_radix: every way with the radix select too, where the warps' lists would merge.
  static Outcome run_and_compare(Case& c, Values kind, bool also_radix = false) {
    const auto want = c.run_cpu();
    std::vector<int32_t> got(c.selected_count());
    const IndexerTopkParams p = c.params(true, c.d_selected.as<int32_t>());
    c.d_workspace = cuda::DeviceBuffer(cuda::indexer_topk_workspace_bytes(p));
    std::vector<float> scores(c.d_workspace.bytes() / sizeof(float));
    Outcome out;
    for (int run = 0; run < (also_radix ? 6 : 3); ++run) {
      const int way = run % 3;
      const cuda::IndexerMath math = kMaths[way];
      const cuda::IndexerTopkOptions options{.math = math, .select = run < 3 ? cuda::IndexerSelect::kAuto
                                                                             : cuda::IndexerSelect::kRadix};
      const Path path = path_of(c, math);
      SCOPED_TRACE(run < 3 ? "" : "radix select");
      for (unsigned char poison : {0xFF, 0x5A}) {
        c.d_selected.fill(poison);
        c.d_workspace.fill(0xFF);
        if (poison == 0xFF) cuda::indexer_topk(p, c.d_workspace.data(), c.d_workspace.bytes(), nullptr, options);
        else cuda::indexer_topk(p, nullptr, options);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
        c.d_selected.download(got.data(), got.size() * sizeof(int32_t));
        SCOPED_TRACE(kMathNames[way]);
        out.near_ties[way] = compare(c, got, want, kind, path);
        if (poison == 0xFF) {
          c.d_workspace.download(scores.data(), c.d_workspace.bytes());
          out.worst[way] = check_scores(c, scores, path);
        }
      }
    }
    return out;
  }
};

const std::vector<int32_t> kContexts = {1, 127, 128, 2048, 2049, 2600, 70000};

TEST_F(IndexerKernel, MatchesCpuOnEveryPageFormat) {
  auto rng = testing::seeded_rng(11);
  for (PageDType dtype : {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
    for (int64_t init : {0, 1}) {
      for (Values kind : {Values::kSmallIntegers, Values::kGaussian}) {
        const Geometry g{4, 128, 16, init, 1};  // M3: 4 index heads of 128, top-16
        SCOPED_TRACE(describe(dtype, g, kind));
        Case c(kContexts, 3, dtype, g, kind, rng);
        const Outcome o = run_and_compare(c, kind);
        if (HasFatalFailure()) return;
        std::printf("[  INFO    ] %s%s: %s\n", describe(dtype, g, kind).c_str(),
                    cuda::indexer_uses_tensor_cores(c.params(true, c.d_selected.as<int32_t>())) ? "" : " (ran exact)",
                    o.describe().c_str());
      }
    }
  }
}

// Both ways to select, past 4,096 candidates (contexts over 512K tokens of 128-token pages):
// up to 32 free slots the warps' merged lists (several rounds of candidates a warp here), the
// most of them (top-34 with two forced blocks) included, and the radix select at every top-k
// (asked for below 33 free slots), which reads its keys from global memory in every pass at
// this length. Keys that are all equal make every free slot a tie (the lowest ids win) and fall
// into one bin of every radix pass. Both select widths run: the wide one for the long
// sequence's step, the narrow one in MatchesCpuOnOtherGeometries. A small head_dim keeps the
// reference cheap.
TEST_F(IndexerKernel, SelectsPastTheSharedKeysAndAmongEqualKeys) {
  auto rng = testing::seeded_rng(15);
  for (const Geometry& g : {Geometry{2, 16, 16, 1, 1}, Geometry{2, 16, 34, 1, 1}, Geometry{2, 16, 64, 1, 1}}) {
    for (Values kind : {Values::kSmallIntegers, Values::kGaussian, Values::kOnes}) {
      SCOPED_TRACE(describe(PageDType::kBF16, g, kind));
      Case c({(4096 + 3) * kPage + 77, 2600}, 2, PageDType::kBF16, g, kind, rng);
      run_and_compare(c, kind, /*also_radix=*/true);
      if (HasFatalFailure()) return;
    }
  }
}

// Other shapes: heads that are not a multiple of the kernels' 4 per pass, 16 heads (the
// tensor-core kernel's four passes), small head_dim (exact kernel only) and large, several
// local blocks, a short top-k, a top-k of forced blocks only.
TEST_F(IndexerKernel, MatchesCpuOnOtherGeometries) {
  auto rng = testing::seeded_rng(12);
  for (const Geometry& g : {Geometry{2, 16, 16, 1, 1}, Geometry{5, 64, 8, 2, 2}, Geometry{1, 256, 16, 0, 3},
                            Geometry{3, 32, 4, 0, 1}, Geometry{16, 128, 16, 1, 1}, Geometry{2, 32, 3, 1, 2}}) {
    for (PageDType dtype : {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
      // NVFP4 with the FP8 query too: the FP8 kernel's passes and head_dims, ties exact.
      for (IndexQueryFormat format : {IndexQueryFormat::kFP32, IndexQueryFormat::kE4M3x2}) {
        if (format != IndexQueryFormat::kFP32 && dtype != PageDType::kNVFP4) continue;
        SCOPED_TRACE(describe(dtype, g, Values::kSmallIntegers) + (format == IndexQueryFormat::kFP32 ? "" : " fp8 query"));
        Case c({1, 127, 129, 700, 2049, 2600}, 4, dtype, g, Values::kSmallIntegers, rng, format);
        run_and_compare(c, Values::kSmallIntegers);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The FP8 query, in one or two E4M3 parts: every backend scores the rounded query, so the
// kernels agree with the CPU as for the FP32 query, within the FP8 kernel's own bound on NVFP4
// pages, and exactly where ties must agree. Also prints how many
// selections the rounding itself changes against the FP32 query's: what the FP8 query gives up.
TEST_F(IndexerKernel, MatchesCpuWithAnFp8Query) {
  auto rng = testing::seeded_rng(14);
  for (IndexQueryFormat format : {IndexQueryFormat::kE4M3x2, IndexQueryFormat::kE4M3}) {
    for (PageDType dtype : {PageDType::kNVFP4, PageDType::kFP8, PageDType::kBF16, PageDType::kFP32}) {
      for (Values kind : {Values::kSmallIntegers, Values::kGaussian}) {
        const Geometry g{4, 128, 16, 1, 1};
        const std::string name = describe(dtype, g, kind) + (format == IndexQueryFormat::kE4M3x2 ? " e4m3x2" : " e4m3");
        SCOPED_TRACE(name);
        Case c(kContexts, 3, dtype, g, kind, rng, format);
        const Outcome o = run_and_compare(c, kind);
        if (HasFatalFailure()) return;
        const auto rounded = c.run_cpu();
        c.query_format = IndexQueryFormat::kFP32;
        const auto given = c.run_cpu();
        int changed = 0;
        const int64_t rows = g.heads * c.batch.tokens();
        for (int64_t r = 0; r < rows; ++r) {
          changed += !std::equal(rounded.begin() + r * g.topk, rounded.begin() + (r + 1) * g.topk, given.begin() + r * g.topk);
        }
        std::printf("[  INFO    ] %s: %s; selections the rounding changed %d of %lld\n", name.c_str(),
                    o.describe().c_str(), changed, static_cast<long long>(rows));
      }
    }
  }
}

// The launches depend on shapes only, so a captured graph replays them on new data: the
// tensor-core kernel with the FP32 query, the FP8 kernel with the FP8 one. The graph holds two
// calls back to back, each with its own query and output, sharing the workspace: on NVFP4 pages
// the second call's scoring kernel starts while the first call's select runs (a programmatic
// dependent that prefetches before it waits), and must not write a score that select still reads.
TEST_F(IndexerKernel, ReplaysFromACapturedGraph) {
  auto rng = testing::seeded_rng(13);
  for (cuda::IndexerMath math : {cuda::IndexerMath::kTensorCores, cuda::IndexerMath::kFp8TensorCores}) {
    SCOPED_TRACE(math == cuda::IndexerMath::kTensorCores ? "tensor cores" : "FP8 tensor cores");
    const IndexQueryFormat format =
        math == cuda::IndexerMath::kTensorCores ? IndexQueryFormat::kFP32 : IndexQueryFormat::kE4M3x2;
    Case c({5, 300, 2049, 9000}, 2, PageDType::kNVFP4, {4, 128, 16, 0, 1}, Values::kSmallIntegers, rng, format);
    const IndexerTopkParams first = c.params(true, c.d_selected.as<int32_t>());
    cuda::DeviceBuffer d_q2(c.q.size() * sizeof(float)), d_selected2(c.selected_count() * sizeof(int32_t));
    IndexerTopkParams second = first;
    second.index_q = d_q2.as<float>();
    second.selected = d_selected2.as<int32_t>();
    cuda::DeviceBuffer workspace(cuda::indexer_topk_workspace_bytes(first));
    cudaStream_t stream;
    FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    FP4_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cuda::indexer_topk(first, workspace.data(), workspace.bytes(), stream, {.math = math});
    cuda::indexer_topk(second, workspace.data(), workspace.bytes(), stream, {.math = math});
    FP4_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    FP4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<int32_t> got(c.selected_count()), got2(c.selected_count());
    for (int replay = 0; replay < 2; ++replay) {
      // New queries each replay, written into the captured buffers.
      const std::vector<float> q1 = make_values(c.q.size(), Values::kSmallIntegers, rng);
      const std::vector<float> q2 = make_values(c.q.size(), Values::kSmallIntegers, rng);
      c.d_q.upload(q1.data(), q1.size() * sizeof(float));
      d_q2.upload(q2.data(), q2.size() * sizeof(float));
      c.d_selected.fill(replay == 0 ? 0xFF : 0x5A);
      d_selected2.fill(replay == 0 ? 0x5A : 0xFF);
      workspace.fill(0xFF);
      FP4_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
      c.d_selected.download(got.data(), got.size() * sizeof(int32_t));
      d_selected2.download(got2.data(), got2.size() * sizeof(int32_t));
      c.q = q1;
      compare(c, got, c.run_cpu(), Values::kSmallIntegers, path_of(c, math));
      c.q = q2;
      compare(c, got2, c.run_cpu(), Values::kSmallIntegers, path_of(c, math));
    }
    FP4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FP4_CUDA_CHECK(cudaGraphDestroy(graph));
    FP4_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// Host-side checks, before anything touches the device (they run without a GPU too).
TEST(IndexerKernelParams, RejectsWhatTheKernelsCannotTake) {
  const auto layout = kvcache::index_page_layout(PageDType::kNVFP4, 128);
  const int32_t positions[1] = {0}, seqs[1] = {0}, tables[1] = {0};
  alignas(16) static uint8_t pool[9216];
  float q[4 * 128] = {};
  int32_t selected[4 * 16];
  const IndexerTopkParams ok{.ctx = {positions, seqs, tables, 1, 1, 1}, .layout = &layout, .pool = pool,
                             .num_pages = 1, .scale = 1.0f, .index_q = q, .heads = 4, .head_dim = 128,
                             .topk = 16, .init_blocks = 0, .local_blocks = 1, .selected = selected};
  auto with = [&](auto change) { IndexerTopkParams p = ok; change(p); return p; };
  testing::expect_error([&] { cuda::indexer_topk(with([](auto& p) { p.head_dim = 64; }), nullptr); },
                        {"head_dim 64", "128 values"});
  testing::expect_error([&] { cuda::indexer_topk(with([](auto& p) { p.init_blocks = 16; }), nullptr); },
                        {"16 init + 1 local", "top-16"});
  testing::expect_error([&] { cuda::indexer_topk(with([](auto& p) { p.scale = 0.5f; }), nullptr); },
                        {"NVFP4", "global scale"});
  testing::expect_error([&] { cuda::indexer_topk(with([](auto& p) { p.topk = 300; }), nullptr); },
                        {"topk 300"});
  const auto kv = kvcache::kv_page_layout(PageDType::kNVFP4, 4, 128);
  testing::expect_error([&] { cuda::indexer_topk(with([&](auto& p) { p.layout = &kv; }), nullptr); },
                        {"key-only", "4 head(s) with V"});
  const auto odd = kvcache::index_page_layout(PageDType::kBF16, 48);
  testing::expect_error([&] { cuda::indexer_topk(with([&](auto& p) { p.layout = &odd; p.head_dim = 48; }), nullptr); },
                        {"16, 32, 64, 128 or 256", "48"});
  testing::expect_error([&] { cuda::indexer_topk(ok, nullptr, 0, nullptr); }, {"workspace"});
  testing::expect_error(
      [&] { cuda::indexer_topk(with([](auto& p) { p.query_format = static_cast<IndexQueryFormat>(7); }), nullptr); },
      {"query format 7"});
}

}  // namespace
}  // namespace fp4
