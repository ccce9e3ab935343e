#include "backend/cuda/paged_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention_launch.h"
#include "backend/cuda/stream_scratch.h"

namespace fp4::cuda {
namespace {

using kvcache::PageDType;

constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

detail::KvFormat kv_format(PageDType dtype) {
  switch (dtype) {
    case PageDType::kFP32: return detail::KvFormat::kF32;
    case PageDType::kBF16: return detail::KvFormat::kBF16;
    case PageDType::kFP8: return detail::KvFormat::kFP8;
    case PageDType::kNVFP4: return detail::KvFormat::kNVFP4;
  }
  fail_internal("paged_attention: unknown page dtype {}", static_cast<int>(dtype));
}

void check_params(const PagedAttentionParams& p) {
  const PagedContext& c = p.ctx;
  FP4_CHECK(p.layout != nullptr, "cuda paged_attention: the page layout is missing");
  const kvcache::PageLayout& l = *p.layout;
  FP4_CHECK(l.has_v, "cuda paged_attention: the layout is an index-K page; attention reads K/V pages");
  FP4_CHECK(p.kv_heads > 0 && p.q_heads > 0 && p.q_heads % p.kv_heads == 0,
            "cuda paged_attention: {} query heads do not split over {} KV heads", p.q_heads, p.kv_heads);
  FP4_CHECK(p.q_heads / p.kv_heads <= 16, "cuda paged_attention: {} query heads per KV head; the "
            "kernels take at most 16", p.q_heads / p.kv_heads);
  FP4_CHECK(p.head_dim == 32 || p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 8 || p.head_dim == 16,
            "cuda paged_attention: head_dim {} is not supported (8, 16, 32, 64 or 128)", p.head_dim);
  // A head's K row must be whole 16-byte vectors: 8 dims in FP32 or BF16, 16 in FP8 too.
  const int64_t bits = l.dtype == PageDType::kFP32 ? 32 : l.dtype == PageDType::kBF16 ? 16 : l.dtype == PageDType::kFP8 ? 8 : 4;
  FP4_CHECK(p.head_dim * bits % 128 == 0,
            "cuda paged_attention: heads of {} dims in {} pages are not whole 16-byte rows", p.head_dim,
            kvcache::page_dtype_name(l.dtype));
  FP4_CHECK(l.heads == p.kv_heads && l.head_dim == p.head_dim && (l.groups == l.heads || l.groups == 1),
            "cuda paged_attention: the page layout holds {} heads of {} dims in {} groups, the params "
            "{} KV heads of {} dims (one group per head, or one for all)", l.heads, l.head_dim, l.groups,
            p.kv_heads, p.head_dim);
  FP4_CHECK(l.page_tokens == detail::kBlockTokens, "cuda paged_attention: pages of {} tokens, the "
            "kernels read {}-token pages", l.page_tokens, detail::kBlockTokens);
  FP4_CHECK(l.page_bytes % 16 == 0 && l.k_codes.offset % 16 == 0 && l.v_codes.offset % 16 == 0,
            "cuda paged_attention: page regions must start on 16-byte boundaries");
  // The kernels address within a page in 32 bits.
  FP4_CHECK(l.page_bytes <= kMaxInt, "cuda paged_attention: pages of {} bytes; the kernels take pages "
            "under 2 GiB", l.page_bytes);
  FP4_CHECK(c.tokens >= 0 && c.tokens <= kMaxInt, "cuda paged_attention: {} tokens", c.tokens);
  if (c.tokens == 0) return;
  FP4_CHECK(c.positions && c.seq_of_token && c.block_tables,
            "cuda paged_attention: positions, seq_of_token and block_tables are required");
  FP4_CHECK(c.num_seqs > 0 && c.num_seqs <= kMaxInt && c.max_blocks > 0 && c.max_blocks <= kMaxInt,
            "cuda paged_attention: {} sequences of {} block-table entries", c.num_seqs, c.max_blocks);
  FP4_CHECK(p.pool != nullptr && p.num_pages > 0 && aligned16(p.pool),
            "cuda paged_attention: the pool must be {} pages at a 16-byte aligned address", p.num_pages);
  FP4_CHECK(p.q && p.out && aligned16(p.q) && aligned16(p.out),
            "cuda paged_attention: q and out must be 16-byte aligned device arrays");
  FP4_CHECK(p.kv_heads <= kMaxGridYZ, "cuda paged_attention: {} KV heads exceed a grid", p.kv_heads);
  FP4_CHECK(p.selected == nullptr || (p.topk > 0 && p.topk <= kMaxInt),
            "cuda paged_attention: a selection needs topk > 0, got {}", p.topk);
  FP4_CHECK(std::isfinite(p.softmax_scale), "cuda paged_attention: softmax_scale {} is not finite",
            p.softmax_scale);
  FP4_CHECK(p.operands == AttentionOperands::kFP32 || p.operands == AttentionOperands::k16Bit,
            "cuda paged_attention: unknown operand precision {}", static_cast<int>(p.operands));
  if (l.dtype == PageDType::kFP8 || l.dtype == PageDType::kNVFP4) {
    for (float s : {p.scales.k, p.scales.v}) {
      FP4_CHECK(std::isfinite(s) && s > 0.0f, "cuda paged_attention: {} page scales must be finite "
                "and positive, got K {} V {}", kvcache::page_dtype_name(l.dtype), p.scales.k, p.scales.v);
    }
  }
  FP4_CHECK(c.tokens * p.q_heads * (p.head_dim / 4) / 256 < kMaxInt,
            "cuda paged_attention: {} tokens of {} heads are too many for one launch", c.tokens, p.q_heads);
}

int sm_count() {
  int sms = 0;
  FP4_CUDA_CHECK(current_device_multiprocessors(&sms));
  return sms;
}

void check_tensor_cores(const kvcache::PageLayout& layout, const char* kernel) {
  FP4_CHECK(layout.dtype != PageDType::kFP32, "cuda paged_attention: the {} kernel needs BF16, FP8 "
            "or NVFP4 pages (FP32 keys are not exact in BF16)", kernel);
  FP4_CHECK(layout.head_dim >= 32 && layout.groups == layout.heads, "cuda paged_attention: the {} "
            "kernel takes head-major pages with heads of 32 dims or more, not {}", kernel, layout.head_dim);
}

// The prefill kernel pays off in dense attention where a sequence has several query tokens of
// the step (on average 4, the tokens one CTA shares pages among) and its CTAs (4 tokens x KV
// head, no split-K) fill the GPU at least once; otherwise the decode kernel's splits win. Sparse
// attention keeps the decode kernel: the prefill kernel is faster only where neighbouring
// tokens select the same blocks, and 2.7x slower where each token's selection is its own
// (docs/kernels/attention_prefill.md), which the launcher cannot know. A function of shapes
// only, so a recorded step keeps its kernel.
bool prefill_shaped(const PagedAttentionParams& p, PrefillKernelUse use) {
  if (use == PrefillKernelUse::kNever || (p.selected != nullptr && use == PrefillKernelUse::kDense)) return false;
  if (p.selected != nullptr && p.topk > detail::kMaxPrefillSelection) return false;
  const int64_t ctas = (p.ctx.tokens + detail::kPrefillTokensPerCta - 1) / detail::kPrefillTokensPerCta * p.kv_heads;
  return p.ctx.tokens >= detail::kPrefillTokensPerCta * p.ctx.num_seqs && ctas >= sm_count();
}

detail::AttentionKernel resolve(const PagedAttentionOptions& options, const PagedAttentionParams& p) {
  const AttentionKernelChoice choice = options.kernel;
  const kvcache::PageLayout& layout = *p.layout;
  const bool fp32 = layout.dtype == PageDType::kFP32;
  switch (choice) {
    case AttentionKernelChoice::kAuto:
      if (fp32 || layout.groups != layout.heads || layout.head_dim < 32) return detail::AttentionKernel::kCudaCore;
      return p.ctx.tokens > 0 && prefill_shaped(p, options.prefill) ? detail::AttentionKernel::kPrefill
                                                   : detail::AttentionKernel::kTensorCore;
    case AttentionKernelChoice::kCudaCore: return detail::AttentionKernel::kCudaCore;
    case AttentionKernelChoice::kTensorCore:
      check_tensor_cores(layout, "tensor-core");
      return detail::AttentionKernel::kTensorCore;
    case AttentionKernelChoice::kPrefill:
      check_tensor_cores(layout, "prefill");
      FP4_CHECK(p.selected == nullptr || p.topk <= detail::kMaxPrefillSelection, "cuda paged_attention: "
                "the prefill kernel takes selections of at most {} blocks, not {}",
                detail::kMaxPrefillSelection, p.topk);
      return detail::AttentionKernel::kPrefill;
  }
  fail_internal("paged_attention: unknown kernel choice {}", static_cast<int>(choice));
}

// Everything the kernels take except the split plan and the workspace.
detail::AttentionArgs make_args(const PagedAttentionParams& p) {
  const kvcache::PageLayout& l = *p.layout;
  detail::AttentionArgs a;
  a.positions = p.ctx.positions;
  a.seq_of_token = p.ctx.seq_of_token;
  a.block_tables = p.ctx.block_tables;
  a.selected = p.selected;
  a.tokens = static_cast<int>(p.ctx.tokens);
  a.num_seqs = static_cast<int>(p.ctx.num_seqs);
  a.max_blocks = static_cast<int>(p.ctx.max_blocks);
  a.topk = p.selected != nullptr ? static_cast<int>(p.topk) : 0;
  a.pool = p.pool;
  a.num_pages = p.num_pages;
  a.page_bytes = l.page_bytes;
  a.k_codes = l.k_codes.offset;
  a.k_scales = l.k_scales.offset;
  a.v_codes = l.v_codes.offset;
  a.v_scales = l.v_scales.offset;
  a.format = kv_format(l.dtype);
  a.flat_heads = l.groups != l.heads;
  const bool scaled = l.dtype == PageDType::kFP8 || l.dtype == PageDType::kNVFP4;
  a.k_scale = scaled ? p.scales.k : 1.0f;
  a.v_scale = scaled ? p.scales.v : 1.0f;
  a.q = p.q;
  a.out = p.out;
  a.q_heads = static_cast<int>(p.q_heads);
  a.kv_heads = static_cast<int>(p.kv_heads);
  a.group = static_cast<int>(p.q_heads / p.kv_heads);
  a.head_dim = static_cast<int>(p.head_dim);
  a.score_scale = static_cast<float>(double{p.softmax_scale} * 1.4426950408889634);  // log2(e)
  a.operands_16bit = p.operands == AttentionOperands::k16Bit;
  return a;
}

// CTAs of this kernel variant the device holds at once (resident per SM x SMs), asked of the
// occupancy calculator once per device and variant.
int64_t resident_ctas(const detail::AttentionArgs& a, detail::AttentionKernel kernel) {
  int device = 0;
  FP4_CUDA_CHECK(cudaGetDevice(&device));
  const std::array<int, 6> key = {device, static_cast<int>(kernel), static_cast<int>(a.format),
                                  a.head_dim, a.group, a.operands_16bit ? 1 : 0};
  static std::mutex mutex;
  static std::map<std::array<int, 6>, int64_t> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    int per_sm = 0;
    FP4_CUDA_CHECK(detail::attention_ctas_per_sm(a, kernel, &per_sm));
    it = cache.emplace(key, int64_t{std::max(per_sm, 1)} * sm_count()).first;
  }
  return it->second;
}

struct SplitPlan {
  int splits = 1;
  int per = 1;  // blocks (dense) or selection slots (sparse) per split
};

// A function of shapes only (and the device), so a captured CUDA graph stays valid. Splits
// multiply the CTAs (tokens x KV heads x splits) that share the resident slots; the plan takes
// the count that minimizes, in pages,
//   waves(s) x (items per split + 1) + s / 4
// where waves(s) = ceil(CTAs / slots), the 1 stands for what a CTA pays besides its pages (Q,
// the page list, the merge of its warps) and s / 4 for the split merge. At 512 CTAs of 16
// selected pages on 396 slots this picks 2 splits (3 waves of half the work) over 1 (2 full
// waves, the second a quarter busy); at 32 (token, KV head) pairs of 16 selected pages, 8 splits of 2 pages rather than 16
// of one (NVFP4 pages on an H200: 30.0 us against 33.5).
SplitPlan plan_splits(const PagedAttentionParams& p, const PagedAttentionOptions& options,
                      const detail::AttentionArgs& a, detail::AttentionKernel kernel) {
  const int64_t items = p.selected != nullptr ? p.topk : p.ctx.max_blocks;
  if (kernel == detail::AttentionKernel::kPrefill) {
    FP4_CHECK(options.splits <= 1, "cuda paged_attention: the prefill kernel has no split-K ({} splits asked)",
              options.splits);
    return {1, static_cast<int>(items)};
  }
  const int64_t max_splits = std::min(items, kMaxGridYZ);
  auto plan_for = [&](int64_t want) {
    want = std::clamp<int64_t>(want, 1, max_splits);
    const int64_t per = (items + want - 1) / want;
    return SplitPlan{static_cast<int>((items + per - 1) / per), static_cast<int>(per)};
  };
  if (options.splits > 0) return plan_for(options.splits);
  const int64_t units = p.ctx.tokens * p.kv_heads, slots = std::max<int64_t>(resident_ctas(a, kernel), 1);
  SplitPlan best = plan_for(1);
  int64_t best_cost = -1;
  // Beyond 4 waves of the base grid more splits only add merge work.
  const int64_t limit = std::min(max_splits, std::max<int64_t>(1, 4 * slots / units));
  for (int64_t want = 1; want <= limit; ++want) {
    const SplitPlan plan = plan_for(want);
    const int64_t waves = (units * plan.splits + slots - 1) / slots;
    const int64_t cost = 4 * waves * (plan.per + 1) + plan.splits;  // in quarter pages
    if (best_cost < 0 || cost < best_cost) {
      best = plan;
      best_cost = cost;
    }
  }
  return best;
}

int64_t round_up(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// [splits, tokens, q_heads, head_dim] partial outputs, then [splits, tokens, q_heads] lse.
int64_t partial_out_bytes(const PagedAttentionParams& p, const SplitPlan& plan) {
  return round_up(int64_t{plan.splits} * p.ctx.tokens * p.q_heads * p.head_dim * 4);
}

size_t workspace_bytes(const PagedAttentionParams& p, const SplitPlan& plan) {
  if (plan.splits == 1) return 0;
  return static_cast<size_t>(partial_out_bytes(p, plan) +
                             round_up(int64_t{plan.splits} * p.ctx.tokens * p.q_heads * 4));
}

// The plan a launch with these params takes, after the same checks (one split for an empty step).
SplitPlan checked_plan(const PagedAttentionParams& p, const PagedAttentionOptions& options) {
  check_params(p);
  const detail::AttentionKernel kernel = resolve(options, p);
  if (p.ctx.tokens == 0) return {};
  return plan_splits(p, options, make_args(p), kernel);
}

}  // namespace

size_t paged_attention_workspace_bytes(const PagedAttentionParams& p,
                                       const PagedAttentionOptions& options) {
  return workspace_bytes(p, checked_plan(p, options));
}

int paged_attention_splits(const PagedAttentionParams& p, const PagedAttentionOptions& options) {
  return checked_plan(p, options).splits;
}

void paged_attention(const PagedAttentionParams& p, void* workspace, size_t workspace_size,
                     cudaStream_t stream, const PagedAttentionOptions& options) {
  check_params(p);
  const detail::AttentionKernel kernel = resolve(options, p);
  if (p.ctx.tokens == 0) return;
  detail::AttentionArgs a = make_args(p);
  const SplitPlan plan = plan_splits(p, options, a, kernel);
  const size_t need = workspace_bytes(p, plan);
  FP4_CHECK(need == 0 || (workspace != nullptr && workspace_size >= need && aligned16(workspace)),
            "cuda paged_attention: {} splits need a 16-byte aligned workspace of {} bytes, got {} "
            "bytes at {}", plan.splits, need, workspace_size, workspace);
  a.splits = plan.splits;
  a.blocks_per_split = plan.per;
  if (plan.splits > 1) {
    a.partial_out = static_cast<float*>(workspace);
    a.partial_lse = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + partial_out_bytes(p, plan));
  }
  FP4_CUDA_CHECK(detail::launch_paged_attention(a, kernel, stream));
}

void paged_attention(const PagedAttentionParams& p, cudaStream_t stream, const PagedAttentionOptions& options) {
  with_stream_scratch(paged_attention_workspace_bytes(p, options), stream, [&](void* workspace, size_t bytes) {
    paged_attention(p, workspace, bytes, stream, options);
  });
}

}  // namespace fp4::cuda
