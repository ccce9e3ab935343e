// How the GPU engine tests compare a GPU run with a CPU run of the same prompt: greedy runs
// with every step's logits kept, and a step-by-step comparison against a budget.
//
// Tolerances. Each GPU op agrees with its CPU reference within the bound its kernel test
// derives: FP32 sums in another order (linear, attention, indexer), expf within 2 ulp (router,
// activation), norms and RoPE within 2^-21 relative. Through the layers these perturbations pass
// softmax, top-k routing and, with FP8 or NVFP4 caches, a quantizer that may move a value by a
// whole code step when the perturbation crosses a rounding boundary; no closed-form end-to-end
// bound follows. The assertions therefore budget the logit difference relative to the step's
// largest logit magnitude: 2^-10 with an FP32 cache (the per-op relative bounds are at most
// 2^-14, a k = 1024 FP32 sum; 2^4 covers their compounding over a few layers), 2^-7 when the
// routed experts are W4A16 (their inputs and activations rounded to BF16, a step of 2^-8
// relative wherever the two engines' values straddle a midpoint: one of a sum's h terms per
// flip, many flips per step). A quantizing cache does the same to cached K and V: 2^-6 with a
// BF16 cache (steps of 2^-8 relative, on top of the experts'), 2^-5 with FP8 and NVFP4 caches
// (one code step of a cached value is up to 1/3 of its magnitude for E2M1; it is diluted across
// a head's dims and the keys attended). The 2^-6 came after a run measured 0.97% with a BF16
// cache at 4K (bench/RESULTS.md), above the 2^-7 first given to it. With an FP32 cache every
// step's logits must be within the budget. With quantized caches a cached index key one code
// step apart can swap an MSA block at a near-tie in any step, which no budget bounds (one run
// measured 5.9% with FP8 at 4K), so there the budget only defines the near-tie below. Greedy
// tokens must agree; where the two paths part, it must be at a near-tie: the CPU's two best
// logits within the budget. Each comparison prints the largest difference it saw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/model_ops.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "kvcache/page_layout.h"

namespace fp4::engine {

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [steps, vocab]
  std::vector<std::vector<int32_t>> prompt_selection;
  // With keep_selections: the MSA selection and the routed experts behind each step's logits,
  // and every prompt token's experts (GenerateResult's).
  std::vector<std::vector<std::vector<int32_t>>> selections, routes;
  std::vector<std::vector<int32_t>> prompt_routes;
};

// Greedy decoding of `steps` tokens after `prompt` in prefill chunks of 2,048 tokens.
// keep_selections runs the decode steps op by op (a recorded step reports no selection);
// `result` receives the whole GenerateResult, and `follow` is another run for this one to follow.
Greedy run(const LoadedModel& m, kvcache::PageDType cache, const std::vector<int32_t>& prompt, int64_t steps,
           bool eager = false, int64_t* recorded = nullptr,
           AttentionOperands operands = AttentionOperands::kFP32, bool keep_selections = false,
           GenerateResult* result = nullptr, const GenerateResult* follow = nullptr);

// The logit budget relative to a step's largest |logit| (above).
double budget(kvcache::PageDType cache, const LoadedModel& m);

// Entries that differ between two per-layer id lists (over their common lengths).
int64_t differing_ids(const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b);

// Compares step by step until the paths part (at a near-tie) or end; returns the steps compared.
// strict: every step's logits within the budget. Otherwise (quantized caches) the budget only
// decides what a near-tie is where the greedy paths part: a cached index key one code step
// apart can swap an MSA block at a near-tie in any decode step, and a block more or less moves
// that step's logits beyond any budget; the largest difference is printed. Where both sides
// kept every step's selection and routing, a strict comparison holds while both agree (the
// prompt's routing included) and goes on from the first step where either differs as a
// quantized cache's does: a router choosing between two experts whose scores are a near-tie
// apart swaps an expert, which moves that token's output as far as a swapped block does.
int64_t expect_same_greedy(const Greedy& cpu, const Greedy& gpu, int64_t vocab, double rel,
                           const std::string& what, bool strict = true);

}  // namespace fp4::engine
