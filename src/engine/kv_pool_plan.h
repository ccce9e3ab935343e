// How many KV pages the serving engine allocates, as vLLM decides it: the memory the engine may
// use (total x utilization, minus what is already in use: weights, other processes), divided by
// the bytes of one page across every layer's caches; optionally capped where more pages could
// never be used (max_num_seqs sequences of max_model_len). The same numbers give the start-up
// report: capacity in tokens and the concurrency at max_model_len, so tokens = concurrency x
// max_model_len holds by construction.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "engine/loaded_model.h"
#include "model/config.h"
#include "model/kv_memory.h"

namespace fp4::engine {

struct MemoryInfo {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;  // free now, after the weights are loaded
};

// This machine's memory from /proc/meminfo (MemTotal, MemAvailable).
MemoryInfo host_memory();
// The memory `backend` allocates from: its device's (after the weights it holds), or the
// host's.
MemoryInfo backend_memory(const Backend& backend);

struct KvPoolRequest {
  double memory_utilization = 0.9;  // --gpu-memory-utilization
  int64_t kv_cache_memory = 0;      // --kv-cache-memory: bytes, overriding the computation when > 0
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 0;         // > 0: no more pages than this many full-length sequences use
  int64_t reserve_bytes = 0;        // kept out of the pool: the steps' activations
};

struct KvPoolPlan {
  int64_t page_bytes = 0;      // one page of every layer's K/V and index caches
  int64_t budget_bytes = 0;    // what sizing allowed
  int64_t num_pages = 0;       // what is allocated
  int64_t tokens = 0;          // num_pages x page tokens
  int64_t pages_per_seq = 0;   // at max_model_len
  double concurrency = 0.0;    // num_pages / pages_per_seq
  bool capped = false;         // num_pages was limited by max_num_seqs
  std::string describe(int64_t max_model_len) const;  // the start-up log lines
};

// Throws fp4::Error, with the numbers, when not even one max_model_len sequence fits.
KvPoolPlan plan_kv_pool(const model::ModelConfig& config, model::CacheFormats formats,
                        const MemoryInfo& memory, const KvPoolRequest& request);

// The serving engine's flags that size its pool.
struct ServingPoolFlags {
  double memory_utilization = 0.9;
  int64_t kv_cache_memory = 0;
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
};

// The pool `fp4serve serve` allocates for `model`, loaded and placed on its backend. On the
// CPU no more pages than max_num_seqs full-length sequences could use: more would only take
// memory from the rest of the machine. A GPU's memory is the engine's, as in vLLM, less room
// for the steps' activations: the planner's estimate of the largest step, doubled because the
// engine keeps activations in FP32 where the estimate counts BF16 (the recorded decode steps,
// at most 256 tokens each, fit inside it), plus what the backend's ops take for themselves.
KvPoolPlan plan_serving_pool(const LoadedModel& model, model::CacheFormats formats, const ServingPoolFlags& flags);

}  // namespace fp4::engine
