// Sparse decode attention benchmark (CUDA builds only): MiniMax-M3.1-Flash geometry, 64 query
// heads over 4 KV heads of 128 dims, each token attending to its top-16 blocks of a 256K-token
// context, at batch 1, 8, 32 and 128, for every page format and both operand precisions
// (AttentionOperands; the 16-bit rows are named so). Each configuration is validated once
// against fp4::cpu::paged_attention on the same pages before it is timed.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// Row bytes are the K/V bytes the launch must read: for every (token, KV head, selected block),
// that head's K and V rows (codes and block scales) of the block's visible tokens. `copy_gbps`
// is the device copy bandwidth measured in the same run (the rows' ceiling).
std::vector<Row> bench_paged_attention(const std::string& device, double copy_gbps, const Options& options);

// The same for one kernel: "auto" (what the engine gets), "tensor-core" (BF16, FP8 and NVFP4
// pages only) or "cuda-core"; the kernel is named in the rows.
std::vector<Row> bench_paged_attention(const std::string& device, double copy_gbps, const Options& options,
                                       const std::string& kernel);

// Prefill attention (section "prefill"): a 4K-token chunk of one sequence, dense over a 4K or
// 16K context and top-16 sparse over 64K (one selection per 128-token query block, and one per
// token), timed with the decode kernel and with the prefill kernel on the same inputs, each
// checked on 32 of its tokens against the CPU reference first. Row bytes are the K/V rows the
// chunk reads at all (each once), plus Q and the output.
std::vector<Row> bench_prefill_attention(const std::string& device, double copy_gbps, int reps);

}  // namespace fp4::bench
