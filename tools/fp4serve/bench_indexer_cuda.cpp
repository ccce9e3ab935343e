// GPU indexer rows of `fp4serve bench`. Each decode step has one query per sequence at the end
// of its context; every sequence owns its pages, scattered over the pool by a shuffled block
// table. The pool's contents are 64 distinct pages of Gaussian keys written by the CPU
// reference and replicated on the device (the timing does not depend on the values, and
// uploading gigabytes would dominate the run). The tensor-core rows are also timed per call of a
// CUDA graph that replays calls back to back, as a captured decode step runs its layers; those
// calls rotate over block tables that place the step's pages at different parts of the pool, so
// that a call's pages are not in the L2 from the call before.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/indexer_topk.h"
#include "tools/fp4serve/bench_indexer.h"

namespace fp4::bench {
namespace {

using kvcache::PageDType;

constexpr int64_t kHeads = 4, kDim = 128, kTopk = 16;
constexpr int64_t kDistinctPages = 64;
constexpr int64_t kContexts[] = {8 * 1024, 32 * 1024, 128 * 1024, 256 * 1024};
constexpr int64_t kCheckedBatch = 8, kCheckedContext = 8 * 1024;
// The graph rows replay at least kGraphCalls calls, and enough block-table variants that a call
// finds its pages at least three L2s of reads back (at most kMaxTableVariants, so the smallest
// shapes, 64 pages a call, can still find some of theirs in the L2).
constexpr int64_t kGraphCalls = 8, kMaxTableVariants = 64;

std::vector<float> gaussian(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// A pool of `pages` pages whose contents repeat kDistinctPages pages of real keys.
cuda::DeviceBuffer make_pool(const kvcache::PageLayout& layout, float scale, int64_t pages,
                             std::mt19937_64& rng) {
  const int64_t page_tokens = layout.page_tokens;
  std::vector<uint8_t> host(kDistinctPages * layout.page_bytes);
  const auto keys = gaussian(kDistinctPages * page_tokens * kDim, rng);
  std::vector<int64_t> slots(kDistinctPages * page_tokens);
  std::iota(slots.begin(), slots.end(), 0);
  cpu::cache_insert({.layout = &layout, .pool = host.data(), .num_pages = kDistinctPages, .k = keys.data(),
                     .v = nullptr, .slots = slots.data(), .tokens = kDistinctPages * page_tokens,
                     .scales = {scale, 1.0f}});
  cuda::DeviceBuffer pool(static_cast<size_t>(pages * layout.page_bytes));
  pool.upload(host.data(), host.size());
  for (int64_t done = kDistinctPages; done < pages; done *= 2) {
    const int64_t n = std::min(done, pages - done);
    FP4_CUDA_CHECK(cudaMemcpy(pool.as<uint8_t>() + done * layout.page_bytes, pool.data(),
                              static_cast<size_t>(n * layout.page_bytes), cudaMemcpyDeviceToDevice));
  }
  return pool;
}

// The ways to score a format: tensor cores and exact, and for NVFP4 pages the radix select,
// and the FP8 query (two E4M3 parts; one part takes the same kernels and time) on the FP16
// tensor-core kernel and on the FP8 one.
struct Way {
  cuda::IndexerMath math;
  IndexQueryFormat query;
  const char* name;
  cuda::IndexerSelect select = cuda::IndexerSelect::kAuto;
};
std::vector<Way> ways(PageDType dtype) {
  std::vector<Way> out{{cuda::IndexerMath::kTensorCores, IndexQueryFormat::kFP32, "tensor cores"}};
  if (dtype == PageDType::kNVFP4) {
    // The radix select where the warps' lists would merge: the two selects side by side.
    out.push_back({cuda::IndexerMath::kTensorCores, IndexQueryFormat::kFP32, "tensor cores, radix select",
                   cuda::IndexerSelect::kRadix});
    out.push_back({cuda::IndexerMath::kTensorCores, IndexQueryFormat::kE4M3x2, "tensor cores, FP8 query"});
    out.push_back({cuda::IndexerMath::kFp8TensorCores, IndexQueryFormat::kE4M3x2, "FP8 tensor cores, FP8 query"});
  }
  out.push_back({cuda::IndexerMath::kExact, IndexQueryFormat::kFP32, "exact"});
  return out;
}

// Per call of a CUDA graph of max(kGraphCalls, variants) calls, call c reading its pages
// through table variant c % variants.
double graph_ms_per_call(const IndexerTopkParams& p, const std::vector<cuda::DeviceBuffer>& tables,
                         const cuda::DeviceBuffer& workspace, const cuda::IndexerTopkOptions& options, int reps) {
  const int64_t calls = std::max<int64_t>(kGraphCalls, static_cast<int64_t>(tables.size()));
  return cuda::median_graph_ms(
             [&](cudaStream_t s) {
               for (int64_t c = 0; c < calls; ++c) {
                 IndexerTopkParams pc = p;
                 pc.ctx.block_tables = tables[c % tables.size()].as<int32_t>();
                 cuda::indexer_topk(pc, workspace.data(), workspace.bytes(), s, options);
               }
             },
             3, reps) /
         static_cast<double>(calls);
}

}  // namespace

std::vector<Row> bench_indexer(const std::string& device, double copy_gbps, const Options& options) {
  const int reps = options.reps;
  std::vector<Row> rows;
  std::mt19937_64 rng(0x1DE7);
  const std::vector<int64_t>& batches = batch_sweep("indexer");
  const int64_t max_pages = batches.back() * kContexts[std::size(kContexts) - 1] / kvcache::kPageTokens;
  const auto l2 = static_cast<int64_t>(cuda::device_info(0).l2_bytes);
  for (PageDType dtype : {PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
    const kvcache::PageLayout layout = kvcache::index_page_layout(dtype, kDim);
    const float scale = dtype == PageDType::kFP8 ? 1.0f / 64 : 1.0f;
    const cuda::DeviceBuffer pool = make_pool(layout, scale, max_pages, rng);
    const int64_t row_bytes = layout.code_row_bytes + layout.scale_row_bytes;
    for (int64_t batch : batches) {
      for (int64_t context : kContexts) {
        // The checked shape runs its CPU check even when --batch leaves it out of the table.
        const bool checked = batch == kCheckedBatch && context == kCheckedContext;
        const bool timed = options.runs_batch(batch);
        if (!timed && !checked) continue;
        const int64_t blocks = context / layout.page_tokens;
        std::vector<int32_t> tables(batch * blocks), positions(batch, static_cast<int32_t>(context - 1)), seqs(batch);
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), rng);
        std::iota(seqs.begin(), seqs.end(), 0);
        const auto q = gaussian(batch * kHeads * kDim, rng);
        const cuda::DeviceBuffer d_positions = cuda::DeviceBuffer::copy_of(positions), d_seqs = cuda::DeviceBuffer::copy_of(seqs),
                                 d_q = cuda::DeviceBuffer::copy_of(q);
        cuda::DeviceBuffer d_selected(kHeads * batch * kTopk * sizeof(int32_t));
        // The step's block table, then for the graph rows the same shifted by whole steps through
        // the pool.
        const int64_t step_pages = batch * blocks, step_bytes = step_pages * layout.page_bytes;
        const int64_t variants = std::clamp<int64_t>((3 * l2 + step_bytes - 1) / step_bytes, 1,
                                                     std::min(kMaxTableVariants, max_pages / step_pages));
        std::vector<cuda::DeviceBuffer> table_variants;
        for (int64_t v = 0; v < variants; ++v) {
          std::vector<int32_t> shifted(tables);
          for (int32_t& page : shifted) page = static_cast<int32_t>(page + v * step_pages);
          table_variants.push_back(cuda::DeviceBuffer::copy_of(shifted));
        }
        IndexerTopkParams p{.ctx = {d_positions.as<int32_t>(), d_seqs.as<int32_t>(), table_variants[0].as<int32_t>(), batch,
                                    batch, blocks},
                            .layout = &layout, .pool = pool.as<uint8_t>(), .num_pages = max_pages, .scale = scale,
                            .index_q = d_q.as<float>(), .heads = kHeads, .head_dim = kDim, .topk = kTopk,
                            .init_blocks = 0, .local_blocks = 1, .selected = d_selected.as<int32_t>()};
        const cuda::DeviceBuffer workspace(cuda::indexer_topk_workspace_bytes(p));
        for (const Way& way : ways(dtype)) {
          const cuda::IndexerTopkOptions way_options{.math = way.math, .select = way.select};
          const bool tensor_cores = way.math != cuda::IndexerMath::kExact;
          p.query_format = way.query;
          auto run = [&](cudaStream_t s) { cuda::indexer_topk(p, workspace.data(), workspace.bytes(), s, way_options); };

          bool validated = false;
          if (checked) {
            // The CPU reference on the same pages: the step uses pages 0 .. batch * blocks - 1.
            std::vector<uint8_t> host_pool(static_cast<size_t>(batch * blocks * layout.page_bytes));
            pool.download(host_pool.data(), host_pool.size());
            std::vector<int32_t> want(kHeads * batch * kTopk), got(want.size());
            IndexerTopkParams c = p;
            c.ctx = {positions.data(), seqs.data(), tables.data(), batch, batch, blocks};
            c.pool = host_pool.data();
            c.num_pages = batch * blocks;
            c.index_q = q.data();
            c.selected = want.data();
            cpu::indexer_topk(c);
            d_selected.fill(0x5A);
            run(nullptr);
            FP4_CUDA_CHECK(cudaDeviceSynchronize());
            d_selected.download(got.data(), got.size() * sizeof(int32_t));
            // The exact path must agree everywhere. The tensor-core paths may differ at a near-tie
            // of the boundary (scores within ~1e-5 relative; tests/kernels bound them): at most
            // one of the batch x heads selections here.
            int differing = 0;
            for (int64_t i = 0; i < kHeads * batch; ++i)
              differing += !std::equal(got.begin() + i * kTopk, got.begin() + (i + 1) * kTopk, want.begin() + i * kTopk);
            if (differing > (tensor_cores ? 1 : 0))
              fail_internal("indexer_topk ({}) on {} pages disagrees with the CPU reference in {} of {} selections "
                            "(batch {}, context {})", way.name, kvcache::page_dtype_name(dtype), differing,
                            kHeads * batch, batch, context);
            validated = true;
          }
          if (!timed) continue;
          const double ms = cuda::median_ms(run, 3, reps);
          const double bytes = double(batch * context * row_bytes) + double(q.size() * sizeof(float)) +
                               double(kHeads * batch * kTopk * sizeof(int32_t));
          const std::string name = fmt::format("indexer top-{} {} {}", kTopk, kvcache::page_dtype_name(dtype), way.name);
          const std::string shape = fmt::format("batch {} x {}K", batch, context / 1024);
          rows.push_back({device, name, shape, bytes, ms, copy_gbps, validated});
          if (way.math == cuda::IndexerMath::kTensorCores && way.query == IndexQueryFormat::kFP32) {
            const double graph_ms = graph_ms_per_call(p, table_variants, workspace, way_options, reps);
            rows.push_back({device, name + " (graph)", shape, bytes, graph_ms, copy_gbps, validated});
          }
        }
      }
    }
  }
  return rows;
}

}  // namespace fp4::bench
