// The MSA indexer on the GPU: fp4::cpu::indexer_topk's contract (backend/model_ops.h).
// Design, numerics and numbers: docs/kernels/indexer.md.
//
// Two launches. Scores: grid (tokens, splits); each CTA reads its range of a token's index-K
// pages once and scores them for every index head into the block scores
// [tokens, heads, max_blocks] FP32 (-inf beyond the visible blocks). Select: one CTA per
// (head, token) finds the best candidates of the free slots (by merging its warps' sorted
// lists, or for many free slots by a radix select) and writes the top-k ids ascending, ties to
// the lower block id.
//
// Three ways to score, each on the query the params name (index_q, or its FP8 rounding read
// back). Exact (CUDA cores): the dot products are the CPU's operation for operation (four
// strided partial sums, combined as (s0 + s2) + (s1 + s3)), so the scores, and hence the
// selections, equal the reference's bit for bit. Tensor cores (the default where they apply):
// keys dequantized exactly in registers (BF16 pages as BF16, FP8 and NVFP4 as FP16), the query
// split into hi + lo of the same type, MMAs with FP32 accumulation; each score is within a
// derived bound of the reference's, so selections can differ only between blocks whose scores
// are that close. FP8 tensor cores (asked for; NVFP4 pages with an FP8 query): E2M1 codes as
// E4M3 on FP8 MMAs, the block scales on their FP32 sums, also within a derived bound.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/model_ops.h"

namespace fp4::cuda {

enum class IndexerMath {
  kTensorCores,     // BF16/FP8/NVFP4 pages, index head_dim 64/128/256, up to 16 heads; else exact
  kFp8TensorCores,  // NVFP4 pages with an FP8 query on FP8 MMAs; else as kTensorCores
  kExact,           // the CPU reference's floats, bit for bit (FP32 pages always)
};

enum class IndexerSelect {
  kAuto,   // merged warp lists up to 32 free slots (topk minus the forced blocks), radix past that
  kRadix,  // the radix select at every top-k (kept to measure and test against)
};

struct IndexerTopkOptions {
  IndexerMath math = IndexerMath::kTensorCores;
  IndexerSelect select = IndexerSelect::kAuto;
};

// Device scratch indexer_topk needs for these shapes: the block scores, tokens x heads x
// max_blocks floats.
size_t indexer_topk_workspace_bytes(const IndexerTopkParams& p);
// The same after the checks indexer_topk makes (an fp4::Error names what is wrong), 0 for an
// empty step: what a caller should allocate before it calls.
size_t indexer_topk_workspace_bytes(const IndexerTopkParams& p, const IndexerTopkOptions& options);

// Pointers in `p` are device pointers, except p.layout, a host object read at the call. Index
// pages of FP32, BF16, FP8 (scale p.scale) or NVFP4 (no global scale); index_head_dim 16, 32,
// 64, 128 or 256; pages of up to 128 tokens; topk up to 256. Asynchronous on `stream`; the grid
// depends on the shapes only (tokens, heads, max_blocks, the SM count), so the launches can be
// captured in a CUDA graph. Device data the host cannot check is made safe instead: a
// block-table entry outside the pool scores as an empty block, and positions beyond the
// block table see max_blocks blocks (the CPU reference throws on both).
void indexer_topk(const IndexerTopkParams& p, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream, const IndexerTopkOptions& options = {});

// Same, with the scratch taken from the stream-ordered allocator (cudaMallocAsync /
// cudaFreeAsync, both capturable).
void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream, const IndexerTopkOptions& options = {});

// Whether these params and options score on tensor cores (else the exact kernel runs).
bool indexer_uses_tensor_cores(const IndexerTopkParams& p, const IndexerTopkOptions& options = {});

namespace detail {

// What the kernels need, by value (the host PageLayout does not travel).
struct IndexerArgs {
  const int32_t* positions = nullptr;     // [tokens]
  const int32_t* seq_of_token = nullptr;  // [tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  int64_t tokens = 0, max_blocks = 0;
  const uint8_t* pool = nullptr;          // [num_pages, page_bytes]
  int64_t num_pages = 0, page_bytes = 0;
  int64_t codes_offset = 0, scales_offset = 0;  // of the K regions in a page
  int page_tokens = 0;
  kvcache::PageDType dtype = kvcache::PageDType::kFP32;
  float scale = 1.0f;                     // FP8 dequantization scale
  const float* index_q = nullptr;         // [tokens, heads, head_dim]
  IndexQueryFormat query_format = IndexQueryFormat::kFP32;
  int heads = 0, head_dim = 0;
  int topk = 0, init_blocks = 0, local_blocks = 0;
  bool tensor_cores = false;               // asked for; used where the shapes allow
  bool fp8_mma = false;                    // the FP8 kernel asked for (NVFP4 pages, FP8 query)
  bool radix_select = false;               // the radix select even where the lists would merge
  int blocks_per_split = 0;               // blocks each scoring CTA covers
  float* scores = nullptr;                // [tokens, heads, max_blocks]
  int32_t* selected = nullptr;            // [heads, tokens, topk]
};

constexpr int kScoreThreads = 128;   // one key of a page per thread
constexpr int kMaxPageTokens = kScoreThreads;
constexpr int kSelectThreads = 256;  // one CTA per (head, token); twice that past kWideSelectBlocks
constexpr int64_t kWideSelectBlocks = 512;  // 64K tokens of 128-token pages
constexpr int kMaxTopk = 256;
constexpr size_t kMaxScoreSmem = 200 * 1024;
constexpr int64_t kMaxBlocks = int64_t{1} << 24;

constexpr int kMmaMaxHeads = 16;     // the tensor-core kernel's: four passes of 4 hi + 4 lo columns

using ScoreKernel = void (*)(IndexerArgs);
struct ScoreVariant {
  ScoreKernel kernel = nullptr;
  size_t smem = 0;
};
// The tensor-core scoring kernel for these shapes (indexer_score_mma.cu); no kernel when it
// does not take them.
ScoreVariant mma_score_variant(const IndexerArgs& a);
// The FP8 tensor-core kernel (indexer_score_fp8.cu): NVFP4 pages with an FP8 query, when asked.
ScoreVariant fp8_score_variant(const IndexerArgs& a);
bool indexer_score_on_tensor_cores(const IndexerArgs& a);

// Scoring CTAs that fit on the device at once, for choosing the split.
cudaError_t indexer_score_ctas_per_sm(const IndexerArgs& a, int& ctas);
// Dynamic shared memory of the scoring launch, for the checks.
size_t indexer_score_smem_bytes(const IndexerArgs& a);

cudaError_t launch_indexer_scores(const IndexerArgs& a, unsigned splits, cudaStream_t stream);
cudaError_t launch_indexer_select(const IndexerArgs& a, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
