// Sparse decode attention at the MiniMax-M3.1-Flash geometry (tools/fp4serve/bench_attention.h).
// Every token sits at the end of its own 256K-token sequence and reads, per KV head, 15 random
// blocks plus its local one. Only selected blocks get pages (a page holds all four heads, so a
// block selected by one head costs the others nothing); pages are random bytes that decode to
// finite values below kPageValueBound in every format. When one launch reads less than three times
// the L2, the timed launches rotate over copies of the pool at other addresses, so every
// launch streams from HBM.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.h"
#include "tools/fp4serve/bench_attention.h"
#include "tools/fp4serve/bench_pages.h"

namespace fp4::bench {
namespace {

using kvcache::PageDType;

constexpr int64_t kKvHeads = 4, kQHeads = 64, kDim = 128, kTopk = 16;
constexpr int64_t kContext = int64_t{256} * 1024, kBlocks = kContext / 128;

// The graph rows replay at least this many calls back to back in one CUDA graph.
constexpr int64_t kGraphCalls = 8;

// Two rows: the host call timed alone by events (checks, split plan, launches), and per call of
// a CUDA graph that replays calls back to back, as a captured decode step runs its layers (no
// host work or launch gap between them). The graph's calls rotate over all the pool's copies,
// so each still reads its pages from HBM.
// splits: forced (0: the split plan's); a forced count names its rows with the count the launch
// takes.
std::vector<Row> run_one(const std::string& device, double copy_gbps, int reps, PageDType dtype, int64_t batch,
            AttentionOperands operands, cuda::AttentionKernelChoice kernel, const std::string& kernel_name,
            int splits, size_t l2_bytes) {
  const auto layout = kvcache::kv_page_layout(dtype, kKvHeads, kDim);
  std::mt19937_64 rng(0xA77E + 16 * batch + static_cast<int>(dtype));
  const int32_t pos = static_cast<int32_t>(kContext - 1);

  // Selections, ascending with the local block last, and a page for every selected block.
  std::vector<int32_t> selected(kKvHeads * batch * kTopk), page_of(batch * kBlocks, -1);
  int32_t pages = 0;
  double bytes = 0;
  for (int64_t g = 0; g < kKvHeads; ++g) {
    for (int64_t t = 0; t < batch; ++t) {
      std::vector<int32_t> ids;
      while (static_cast<int64_t>(ids.size()) < kTopk - 1) {
        const auto b = static_cast<int32_t>(rng() % (kBlocks - 1));
        if (std::find(ids.begin(), ids.end(), b) == ids.end()) ids.push_back(b);
      }
      ids.push_back(static_cast<int32_t>(kBlocks - 1));
      std::sort(ids.begin(), ids.end());
      for (int64_t i = 0; i < kTopk; ++i) {
        selected[(g * batch + t) * kTopk + i] = ids[i];
        int32_t& page = page_of[t * kBlocks + ids[i]];
        if (page < 0) page = pages++;
        const int64_t visible = std::min<int64_t>(128, pos + 1 - int64_t{ids[i]} * 128);
        bytes += 2.0 * visible * (layout.code_row_bytes + layout.scale_row_bytes);
      }
    }
  }
  const int64_t variants = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(3.0 * static_cast<double>(l2_bytes) / bytes)), 1, 64);

  std::vector<uint8_t> pool(static_cast<size_t>(pages * layout.page_bytes));
  uint64_t state = rng();
  fill_pages(layout, pool.data(), pages, state);
  const kvcache::KvScales scales = bench_page_scales(dtype);
  std::normal_distribution<float> normal;
  std::vector<float> q(batch * kQHeads * kDim);
  for (float& x : q) x = normal(rng);
  std::vector<int32_t> positions(batch, pos), seq_of_token(batch);
  for (int64_t t = 0; t < batch; ++t) seq_of_token[t] = static_cast<int32_t>(t);
  std::vector<std::vector<int32_t>> tables(variants, std::vector<int32_t>(batch * kBlocks, 0));
  for (int64_t v = 0; v < variants; ++v) {
    for (size_t i = 0; i < page_of.size(); ++i) {
      if (page_of[i] >= 0) tables[v][i] = static_cast<int32_t>(page_of[i] + v * pages);
    }
  }

  // The CPU reference on variant 0.
  const float softmax_scale = 1.0f / std::sqrt(float{kDim});
  PagedAttentionParams p{.ctx = {positions.data(), seq_of_token.data(), tables[0].data(), batch, batch, kBlocks},
                         .layout = &layout, .pool = pool.data(), .num_pages = pages, .scales = scales,
                         .q = q.data(), .out = nullptr, .q_heads = kQHeads, .kv_heads = kKvHeads,
                         .head_dim = kDim, .softmax_scale = softmax_scale, .selected = selected.data(),
                         .topk = kTopk, .operands = operands};
  std::vector<float> want(q.size()), got(q.size());
  p.out = want.data();
  cpu::paged_attention(p);

  cuda::DeviceBuffer d_pool(pool.size() * variants), d_q(q.size() * 4), d_out(q.size() * 4);
  cuda::DeviceBuffer d_sel(selected.size() * 4), d_pos(batch * 4), d_seq(batch * 4);
  d_pool.upload(pool.data(), pool.size());
  for (int64_t v = 1; v < variants; ++v) {
    FP4_CUDA_CHECK(cudaMemcpy(d_pool.as<uint8_t>() + v * pool.size(), d_pool.data(), pool.size(),
                              cudaMemcpyDeviceToDevice));
  }
  d_q.upload(q.data(), q.size() * 4);
  d_sel.upload(selected.data(), selected.size() * 4);
  d_pos.upload(positions.data(), batch * 4);
  d_seq.upload(seq_of_token.data(), batch * 4);
  std::vector<cuda::DeviceBuffer> d_tables;
  std::vector<PagedAttentionParams> launches;
  for (int64_t v = 0; v < variants; ++v) {
    d_tables.emplace_back(tables[v].size() * 4);
    d_tables.back().upload(tables[v].data(), tables[v].size() * 4);
    PagedAttentionParams pd = p;
    pd.ctx = {d_pos.as<int32_t>(), d_seq.as<int32_t>(), d_tables.back().as<int32_t>(), batch, batch, kBlocks};
    pd.pool = d_pool.as<uint8_t>();
    pd.num_pages = pages * variants;
    pd.q = d_q.as<float>();
    pd.out = d_out.as<float>();
    pd.selected = d_sel.as<int32_t>();
    launches.push_back(pd);
  }
  const cuda::PagedAttentionOptions options{kernel, splits};
  cuda::DeviceBuffer workspace(std::max<size_t>(cuda::paged_attention_workspace_bytes(launches[0], options), 16));

  d_out.fill(0xFF);
  cuda::paged_attention(launches[0], workspace.data(), workspace.bytes(), nullptr, options);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  d_out.download(got.data(), got.size() * 4);
  // The kernel tests' bound (tests/kernels/paged_attention_test.cpp) with n = 2048 keys, |V| <
  // kPageValueBound and |logit| <= A = softmax_scale * kPageValueBound * |q|_1 (Hoelder); with
  // 16-bit operands plus their weights' rounding, 2 u16 + n u (FP16) or 2 u16 (BF16, FP32).
  const bool f16 = dtype == PageDType::kFP8 || dtype == PageDType::kNVFP4;
  const double rounding = operands == AttentionOperands::k16Bit ? 2 * (f16 ? 0x1p13 : 0x1p16) + (f16 ? 2048 : 0) : 0;
  bool ok = true;
  for (int64_t row = 0; row < batch * kQHeads; ++row) {
    double q1 = 0;
    for (int64_t e = 0; e < kDim; ++e) q1 += std::abs(q[row * kDim + e]);
    const double a = softmax_scale * kPageValueBound * q1;
    const double tol = kPageValueBound * 0x1p-24 * ((2.0 * kDim + 336) * a + 8.5 * 2048 + 196 + rounding);
    for (int64_t e = 0; e < kDim; ++e) ok &= std::abs(double{got[row * kDim + e]} - want[row * kDim + e]) <= tol;
  }

  size_t next = 0;
  const double ms = cuda::median_ms(
      [&](cudaStream_t s) {
        cuda::paged_attention(launches[next++ % launches.size()], workspace.data(), workspace.bytes(), s, options);
      },
      3, reps);
  const std::string name = fmt::format("paged attention sparse {}{}{}", kvcache::page_dtype_name(dtype),
                                       operands == AttentionOperands::k16Bit ? " 16-bit operands" : "",
                                       kernel_name == "auto" ? "" : " (" + kernel_name + ")");
  const int64_t calls = std::max<int64_t>(kGraphCalls, variants);
  const double graph_ms =
      cuda::median_graph_ms(
          [&](cudaStream_t s) {
            for (int64_t c = 0; c < calls; ++c) {
              cuda::paged_attention(launches[c % launches.size()], workspace.data(), workspace.bytes(), s, options);
            }
          },
          3, reps) /
      static_cast<double>(calls);
  std::string shape = fmt::format("b{} 64/4x128 top16 of 256K", batch);
  if (splits > 0) shape += fmt::format(", {} splits", cuda::paged_attention_splits(launches[0], options));
  return {{device, name, shape, bytes, ms, copy_gbps, ok}, {device, name + " (graph)", shape, bytes, graph_ms, copy_gbps, ok}};
}

}  // namespace

std::vector<Row> bench_paged_attention(const std::string& device, double copy_gbps, const Options& options,
                                       const std::string& kernel) {
  cuda::AttentionKernelChoice choice = cuda::AttentionKernelChoice::kAuto;
  if (kernel == "tensor-core") choice = cuda::AttentionKernelChoice::kTensorCore;
  else if (kernel == "cuda-core") choice = cuda::AttentionKernelChoice::kCudaCore;
  else if (kernel != "auto") fail("bench_paged_attention: unknown kernel '{}' (auto, tensor-core, cuda-core)", kernel);
  const size_t l2 = cuda::device_info(0).l2_bytes;
  std::vector<Row> rows;
  for (PageDType dtype : {PageDType::kNVFP4, PageDType::kFP8, PageDType::kBF16, PageDType::kFP32}) {
    if (dtype == PageDType::kFP32 && choice == cuda::AttentionKernelChoice::kTensorCore) continue;
    for (AttentionOperands operands : {AttentionOperands::kFP32, AttentionOperands::k16Bit}) {
      for (int64_t batch : batch_sweep("attention")) {
        if (!options.runs_batch(batch)) continue;
        for (Row& row : run_one(device, copy_gbps, options.reps, dtype, batch, operands, choice, kernel,
                                   options.attention_splits, l2)) {
          if (!row.validated) fail_internal("{} ({}) disagrees with the CPU reference", row.kernel, row.shape);
          rows.push_back(std::move(row));
        }
      }
    }
  }
  return rows;
}

std::vector<Row> bench_paged_attention(const std::string& device, double copy_gbps, const Options& options) {
  return bench_paged_attention(device, copy_gbps, options, "auto");
}

}  // namespace fp4::bench
