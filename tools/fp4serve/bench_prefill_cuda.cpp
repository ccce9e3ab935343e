// Prefill attention at the MiniMax-M3.1-Flash geometry (tools/fp4serve/bench_attention.h): one
// sequence, a chunk of query tokens at the end of its context, the decode kernel (one CTA per
// token and KV head, split-K) against the prefill kernel (one CTA per 4 tokens and KV head) on
// the same pages and queries. Sparse chunks read top-16 blocks per (token, KV head): either one
// selection per 128-token query block (neighbouring tokens agreeing, the prefill kernel's good
// case) or an independent one per token (its worst case: a CTA's 4 tokens share only their
// local block).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.h"
#include "tools/fp4serve/bench_attention.h"
#include "tools/fp4serve/bench_pages.h"

namespace fp4::bench {
namespace {

using kvcache::PageDType;
using Choice = cuda::AttentionKernelChoice;

constexpr int64_t kKvHeads = 4, kQHeads = 64, kDim = 128, kTopk = 16;
constexpr int64_t kChecked = 32;  // tokens of the chunk checked against the CPU reference

struct Shape {
  std::string name;
  int64_t context, chunk;
  bool sparse, per_query_block;
};

// Top-16 of the blocks visible from `own`: the local block and 15 others drawn from `seed`.
std::vector<int32_t> draw_selection(int32_t own, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(own);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(std::min<size_t>(ids.size(), kTopk - 1));
  ids.push_back(own);
  std::sort(ids.begin(), ids.end());
  ids.resize(kTopk, -1);
  return ids;
}

struct Run {
  double ms = 0;
  bool ok = false;
};

std::vector<Row> run_shape(const std::string& device, double copy_gbps, int reps, PageDType dtype, const Shape& s) {
  const auto layout = kvcache::kv_page_layout(dtype, kKvHeads, kDim);
  const int64_t blocks = s.context / 128, first = s.context - s.chunk;
  std::mt19937_64 rng(0x9AEF + static_cast<int>(dtype) + s.context + s.chunk);
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<uint8_t> pool(static_cast<size_t>(blocks * layout.page_bytes));
  uint64_t state = rng();
  fill_pages(layout, pool.data(), blocks, state);
  const kvcache::KvScales scales = bench_page_scales(dtype);

  std::vector<int32_t> positions(s.chunk), seq_of_token(s.chunk, 0), selected;
  std::iota(positions.begin(), positions.end(), static_cast<int32_t>(first));
  std::vector<std::set<int32_t>> read(kKvHeads);  // blocks each KV head reads at all
  if (s.sparse) {
    selected.resize(kKvHeads * s.chunk * kTopk);
    for (int64_t g = 0; g < kKvHeads; ++g) {
      for (int64_t t = 0; t < s.chunk; ++t) {
        const int32_t own = positions[t] / 128;
        const uint64_t seed = s.per_query_block ? (g << 40 | uint64_t(own)) : (g << 40 | 1ull << 39 | uint64_t(t));
        const auto ids = draw_selection(own, seed);
        std::copy(ids.begin(), ids.end(), &selected[(g * s.chunk + t) * kTopk]);
        for (int32_t b : ids) {
          if (b >= 0) read[g].insert(b);
        }
      }
    }
  } else {
    for (auto& r : read) {
      for (int32_t b = 0; b < blocks; ++b) r.insert(b);
    }
  }
  double bytes = 2.0 * s.chunk * kQHeads * kDim * 4;  // Q in, output out
  for (const auto& r : read) {
    for (int32_t b : r) bytes += 2.0 * std::min<int64_t>(128, s.context - int64_t{b} * 128) * (layout.code_row_bytes + layout.scale_row_bytes);
  }
  std::normal_distribution<float> normal;
  std::vector<float> q(s.chunk * kQHeads * kDim);
  for (float& x : q) x = normal(rng);
  const float softmax_scale = 1.0f / std::sqrt(float{kDim});

  // The CPU reference on kChecked tokens spread over the chunk.
  std::vector<int64_t> checked(kChecked);
  for (int64_t i = 0; i < kChecked; ++i) checked[i] = (2 * i + 1) * s.chunk / (2 * kChecked);
  std::vector<int32_t> c_pos(kChecked), c_seq(kChecked, 0), c_sel;
  std::vector<float> c_q(kChecked * kQHeads * kDim), want(c_q.size());
  for (int64_t i = 0; i < kChecked; ++i) {
    c_pos[i] = positions[checked[i]];
    std::copy_n(&q[checked[i] * kQHeads * kDim], kQHeads * kDim, &c_q[i * kQHeads * kDim]);
  }
  if (s.sparse) {
    c_sel.resize(kKvHeads * kChecked * kTopk);
    for (int64_t g = 0; g < kKvHeads; ++g) {
      for (int64_t i = 0; i < kChecked; ++i) {
        std::copy_n(&selected[(g * s.chunk + checked[i]) * kTopk], kTopk, &c_sel[(g * kChecked + i) * kTopk]);
      }
    }
  }
  cpu::paged_attention({.ctx = {c_pos.data(), c_seq.data(), table.data(), kChecked, 1, blocks}, .layout = &layout,
                        .pool = pool.data(), .num_pages = blocks, .scales = scales, .q = c_q.data(),
                        .out = want.data(), .q_heads = kQHeads, .kv_heads = kKvHeads, .head_dim = kDim,
                        .softmax_scale = softmax_scale, .selected = s.sparse ? c_sel.data() : nullptr,
                        .topk = s.sparse ? kTopk : 0});

  auto d_pool = cuda::DeviceBuffer::copy_of(pool), d_q = cuda::DeviceBuffer::copy_of(q);
  auto d_pos = cuda::DeviceBuffer::copy_of(positions), d_seq = cuda::DeviceBuffer::copy_of(seq_of_token);
  auto d_tab = cuda::DeviceBuffer::copy_of(table);
  cuda::DeviceBuffer d_sel(std::max<size_t>(selected.size() * 4, 16)), d_out(q.size() * 4);
  if (s.sparse) d_sel.upload(selected.data(), selected.size() * 4);
  const PagedAttentionParams p{.ctx = {d_pos.as<int32_t>(), d_seq.as<int32_t>(), d_tab.as<int32_t>(), s.chunk, 1, blocks},
                               .layout = &layout, .pool = d_pool.as<uint8_t>(), .num_pages = blocks,
                               .scales = scales, .q = d_q.as<float>(), .out = d_out.as<float>(),
                               .q_heads = kQHeads, .kv_heads = kKvHeads, .head_dim = kDim,
                               .softmax_scale = softmax_scale,
                               .selected = s.sparse ? d_sel.as<int32_t>() : nullptr,
                               .topk = s.sparse ? kTopk : 0};

  auto run = [&](Choice kernel) {
    const cuda::PagedAttentionOptions options{kernel, 0};
    cuda::DeviceBuffer workspace(std::max<size_t>(cuda::paged_attention_workspace_bytes(p, options), 16));
    d_out.fill(0xFF);
    cuda::paged_attention(p, workspace.data(), workspace.bytes(), nullptr, options);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(q.size());
    d_out.download(got.data(), got.size() * 4);
    // The kernel tests' bound with n visible keys, |V| < kPageValueBound and |logit| <= A =
    // softmax_scale * kPageValueBound * |q|_1 (Hoelder).
    Run result{0, true};
    for (int64_t i = 0; i < kChecked; ++i) {
      const double n = s.sparse ? kTopk * 128.0 : c_pos[i] + 1.0;
      for (int64_t h = 0; h < kQHeads; ++h) {
        const float* qrow = &c_q[(i * kQHeads + h) * kDim];
        double q1 = 0;
        for (int64_t e = 0; e < kDim; ++e) q1 += std::abs(qrow[e]);
        const double a = softmax_scale * kPageValueBound * q1;
        const double tol = kPageValueBound * 0x1p-24 * ((2.0 * kDim + 336) * a + 8.5 * n + 196);
        for (int64_t e = 0; e < kDim; ++e) {
          const size_t at = (checked[i] * kQHeads + h) * kDim + e, w = (i * kQHeads + h) * kDim + e;
          result.ok &= std::abs(double{got[at]} - want[w]) <= tol;
        }
      }
    }
    result.ms = cuda::median_ms(
        [&](cudaStream_t stream) { cuda::paged_attention(p, workspace.data(), workspace.bytes(), stream, options); },
        2, reps);
    return result;
  };
  std::vector<Row> rows;
  const std::string shape = fmt::format("{} 64/4x128", s.name);
  for (auto [kernel, name] : {std::pair{Choice::kTensorCore, "decode kernel"}, std::pair{Choice::kPrefill, "prefill kernel"}}) {
    const Run r = run(kernel);
    rows.push_back({device, fmt::format("prefill attention {} ({})", kvcache::page_dtype_name(dtype), name), shape,
                    bytes, r.ms, copy_gbps, r.ok});
    if (!r.ok) fail_internal("{} ({}) disagrees with the CPU reference", rows.back().kernel, shape);
  }
  return rows;
}

}  // namespace

std::vector<Row> bench_prefill_attention(const std::string& device, double copy_gbps, int reps) {
  const std::vector<Shape> shapes = {
      {"dense, 4K prompt", 4096, 4096, false, false},
      {"dense, 4K chunk ending at 16K", 16384, 4096, false, false},
      {"top16 per query block, 4K chunk ending at 64K", 65536, 4096, true, true},
      {"top16 per token, 4K chunk ending at 64K", 65536, 4096, true, false},
  };
  std::vector<Row> rows;
  for (PageDType dtype : {PageDType::kNVFP4, PageDType::kFP8, PageDType::kBF16}) {  // the prefill kernel's formats
    for (const Shape& s : shapes) {
      for (Row& r : run_shape(device, copy_gbps, std::max(3, reps / 4), dtype, s)) rows.push_back(std::move(r));
    }
  }
  return rows;
}

}  // namespace fp4::bench
