#include "engine/kv_pool_plan.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "kvcache/sizing.h"
#include "model/activations.h"

namespace fp4::engine {

MemoryInfo host_memory() {
  std::ifstream in("/proc/meminfo");
  FP4_CHECK(in.good(), "cannot read /proc/meminfo to size the KV cache; give --kv-cache-memory");
  MemoryInfo m;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.available_bytes = kib * 1024;
  }
  FP4_CHECK(m.total_bytes > 0 && m.available_bytes > 0,
            "/proc/meminfo has no MemTotal/MemAvailable; give --kv-cache-memory");
  return m;
}

MemoryInfo backend_memory(const Backend& backend) {
  const Backend::MemoryStats device = backend.device_memory();
  if (device.total_bytes == 0) return host_memory();
  return {.total_bytes = device.total_bytes, .available_bytes = device.free_bytes};
}

KvPoolPlan plan_kv_pool(const model::ModelConfig& config, model::CacheFormats formats,
                        const MemoryInfo& memory, const KvPoolRequest& r) {
  FP4_CHECK(r.memory_utilization > 0 && r.memory_utilization <= 1,
            "--gpu-memory-utilization must be in (0, 1], got {}", r.memory_utilization);
  FP4_CHECK(r.max_model_len > 0, "max_model_len must be positive, got {}", r.max_model_len);
  KvPoolPlan p;
  p.page_bytes = model::KvMemory::page_bytes(config, formats);
  if (r.kv_cache_memory > 0) {
    p.budget_bytes = r.kv_cache_memory;
  } else {
    // vLLM: requested = ceil(total x utilization); what is in use now (weights, everything
    // else on the machine) is not available to the cache.
    const int64_t in_use = memory.total_bytes - memory.available_bytes;
    p.budget_bytes = kvcache::kv_budget_bytes(memory.total_bytes, r.memory_utilization, in_use + r.reserve_bytes);
  }
  p.pages_per_seq = kvcache::pages_for_tokens(r.max_model_len);
  p.num_pages = p.budget_bytes > 0 ? p.budget_bytes / p.page_bytes : 0;
  FP4_CHECK(p.num_pages >= p.pages_per_seq,
            "the KV cache has room for {} pages ({:.1f} MiB of {} bytes each) but one sequence of "
            "max_model_len {} needs {}: lower --max-model-len, raise --gpu-memory-utilization, or "
            "give --kv-cache-memory", p.num_pages, p.budget_bytes / 1048576.0, p.page_bytes,
            r.max_model_len, p.pages_per_seq);
  if (r.max_num_seqs > 0 && p.num_pages > r.max_num_seqs * p.pages_per_seq) {
    p.num_pages = r.max_num_seqs * p.pages_per_seq;
    p.capped = true;
  }
  p.tokens = p.num_pages * kvcache::kPageTokens;
  p.concurrency = static_cast<double>(p.num_pages) / static_cast<double>(p.pages_per_seq);
  return p;
}

KvPoolPlan plan_serving_pool(const LoadedModel& model, model::CacheFormats formats, const ServingPoolFlags& f) {
  const bool host = model.backend->uses_host_memory();
  const int64_t activations =
      host ? 0
           : 2 * model::estimate_activations(model.config, {.max_num_batched_tokens = f.max_num_batched_tokens,
                                                           .max_num_seqs = f.max_num_seqs,
                                                           .max_model_len = f.max_model_len})
                         .peak +
                 model.backend->op_scratch_bytes();
  return plan_kv_pool(model.config, formats, backend_memory(*model.backend),
                      {.memory_utilization = f.memory_utilization, .kv_cache_memory = f.kv_cache_memory,
                       .max_model_len = f.max_model_len, .max_num_seqs = host ? f.max_num_seqs : 0,
                       .reserve_bytes = activations});
}

std::string KvPoolPlan::describe(int64_t max_model_len) const {
  std::string s = fmt::format(
      "KV cache size: {} tokens ({} pages of {} tokens, {:.1f} MiB; {} bytes per page across all "
      "layers)\nMaximum concurrency for {} tokens per request: {:.2f}x",
      tokens, num_pages, kvcache::kPageTokens, num_pages * static_cast<double>(page_bytes) / 1048576.0,
      page_bytes, max_model_len, concurrency);
  if (capped) {
    s += fmt::format("\n(the budget of {:.1f} MiB would hold more; capped at what max_num_seqs "
                     "sequences of max_model_len can use)", budget_bytes / 1048576.0);
  }
  return s;
}

}  // namespace fp4::engine
