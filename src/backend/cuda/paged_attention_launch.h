// Raw launchers of the paged attention kernels, for paged_attention.cpp. The params are already
// checked there; everything the kernels need travels by value in AttentionArgs (the page layout
// included), so the .cu files see no host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4::cuda::detail {

enum class KvFormat : uint8_t { kF32, kBF16, kFP8, kNVFP4 };

// Which kernel runs the attention. Tensor cores need K and V exact in BF16 before their
// per-layer scale, so they take BF16, FP8 and NVFP4 pages; FP32 pages use CUDA cores. The
// prefill kernel (tensor cores too) shares each staged page among 4 query tokens; it has no
// split-K and takes selections of at most kMaxPrefillSelection blocks.
enum class AttentionKernel : uint8_t { kCudaCore, kTensorCore, kPrefill };

constexpr int kAttentionThreads = 128;  // 4 warps per CTA in both kernels
constexpr int kBlockTokens = 128;       // one page = one MSA block = one K/V tile
constexpr int kMaxPrefillSelection = 64;
constexpr int kPrefillTokensPerCta = 4;

struct AttentionArgs {
  // The step: token t at positions[t] of sequence seq_of_token[t].
  const int32_t* positions = nullptr;     // [tokens]
  const int32_t* seq_of_token = nullptr;  // [tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  const int32_t* selected = nullptr;      // [kv_heads, tokens, topk], or nullptr: dense
  int tokens = 0, num_seqs = 0, max_blocks = 0, topk = 0;
  // The pages (kvcache/page_layout.h, 128 tokens). Head-major pages (one group per head) hold
  // head g's key j at row g * 128 + j of a region, rows of head_dim values; flattened ones (one
  // group, heads of fewer than 16 dims) at row j * kv_heads + g. Only the CUDA-core kernel
  // takes flattened pages.
  bool flat_heads = false;
  const uint8_t* pool = nullptr;          // [num_pages, page_bytes], 16-byte aligned
  int64_t num_pages = 0, page_bytes = 0;
  int64_t k_codes = 0, k_scales = 0, v_codes = 0, v_scales = 0;  // region offsets in a page
  KvFormat format = KvFormat::kF32;
  float k_scale = 1.0f, v_scale = 1.0f;   // FP8 scale or NVFP4 global scale; 1 otherwise
  // Heads.
  const float* q = nullptr;               // [tokens, q_heads, head_dim]
  float* out = nullptr;                   // [tokens, q_heads, head_dim]
  int q_heads = 0, kv_heads = 0, group = 0, head_dim = 0;
  float score_scale = 0.0f;               // softmax_scale * log2(e): logits in base 2
  // AttentionOperands::k16Bit: Q and the weights rounded to FP16 (FP8, NVFP4 pages) or BF16.
  bool operands_16bit = false;
  // Split-K: split s of a (token, KV head) takes the blocks (dense) or the selection slots
  // (sparse) [s * blocks_per_split, (s + 1) * blocks_per_split).
  int splits = 1, blocks_per_split = 1;
  float* partial_out = nullptr;           // [splits, tokens, q_heads, head_dim] when splits > 1
  float* partial_lse = nullptr;           // [splits, tokens, q_heads], log2 domain
};

// Grid (tokens, kv_heads, splits), then, when splits > 1, the merge kernel; the prefill
// kernel's grid is (tokens / 4 rounded up, kv_heads).
cudaError_t launch_paged_attention(const AttentionArgs& a, AttentionKernel kernel,
                                   cudaStream_t stream);

// CTAs of the kernel that serves `a` (format, head_dim, group) resident per SM: the split plan
// counts its waves in them.
cudaError_t attention_ctas_per_sm(const AttentionArgs& a, AttentionKernel kernel, int* ctas);

// The kernels, one per .cu file; launch_paged_attention picks one and adds the merge.
cudaError_t launch_attention_cuda_core(const AttentionArgs& a, cudaStream_t stream);
cudaError_t launch_attention_tensor_core(const AttentionArgs& a, cudaStream_t stream);
cudaError_t launch_attention_prefill(const AttentionArgs& a, cudaStream_t stream);
cudaError_t cuda_core_ctas_per_sm(const AttentionArgs& a, int* ctas);
cudaError_t tensor_core_ctas_per_sm(const AttentionArgs& a, int* ctas);
cudaError_t prefill_ctas_per_sm(const AttentionArgs& a, int* ctas);

}  // namespace fp4::cuda::detail
