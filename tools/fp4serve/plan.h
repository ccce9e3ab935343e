// `fp4serve plan`: how many sequences of a given length a deployment can hold at once.
// The arithmetic lives in the layers the engine uses (kvcache/ sizes pages, model/ counts
// weights); this part resolves flags into those layers' inputs and prints the results.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kvcache/sizing.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/presets.h"
#include "model/weights.h"

namespace fp4::cli::plan {

struct GpuPreset {
  std::string_view name;           // what --gpu accepts
  std::string_view label;
  double published_gb;             // the vendor's figure
  int64_t memory_bytes;            // what the planner uses
  std::string_view memory_source;  // where memory_bytes comes from
};

const std::vector<GpuPreset>& gpu_presets();
const GpuPreset* lookup_gpu(std::string_view name);  // case-insensitive; nullptr when unknown
const GpuPreset& find_gpu(std::string_view name);    // throws listing the known names

// Token counts: "4096", "256k", "128K", "1m", "1.5k"; k = 1024, m = 1024^2.
int64_t parse_token_count(std::string_view text, std::string_view flag);
// Byte sizes: "250116419880", "451.5e9", "451.5GB", "420GiB" (KB/MB/GB/TB are powers of 1000,
// KiB/MiB/GiB/TiB powers of 1024).
int64_t parse_byte_size(std::string_view text, std::string_view flag);

// Flags as given; std::nullopt means "not given".
struct Options {
  std::string model;
  std::optional<std::string> checkpoint;
  std::optional<std::string> weights_bytes;
  std::optional<std::string> quantization;
  std::string kv_cache_dtype = "bf16";
  std::string index_cache_dtype = "bf16";
  std::string gpu = "h200";
  std::optional<double> gpu_memory_gb;
  std::optional<int> num_gpus, tp, dp, ep, dep;
  std::optional<std::string> max_model_len;
  double gpu_memory_utilization = 0.9;
  std::optional<double> reserve_gb;
  double runtime_overhead_gb = 4.0;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_num_seqs = 256;
  std::optional<std::string> find_min_gpus;  // "tp" or "dep": search the GPU count
};

// A layout that cannot run at all: the parallelism does not divide the GPUs, heads or experts,
// or the weights and reserve exceed a GPU's usable memory. A subclass so that the search over
// GPU counts can step past these while any other bad input still stops it.
class LayoutError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
void layout_check(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) throw LayoutError(fmt::format(format, std::forward<Args>(args)...));
}

struct Parallelism {
  int dp = 1;  // data-parallel ranks, each with its own KV pool and scheduler
  int tp = 1;  // GPUs per rank, splitting attention heads
  int ep = 1;  // GPUs the routed experts are spread over
  bool dep = false;
  int num_gpus() const { return dp * tp; }
  std::string label() const;
};

// Checks the flags against each other and the model; throws fp4::Error naming the conflict.
Parallelism resolve_parallelism(const Options& options, const model::ModelConfig& config);

struct Result {
  std::string model_name;  // display name
  std::string model_source;
  model::ModelConfig config;
  std::optional<model::QuantScheme> scheme;  // absent when sizes come from a checkpoint
  std::string gpu_name;   // preset name, or as given with --gpu-memory-gb
  std::string gpu_label;
  double gpu_published_gb = 0;
  int64_t gpu_memory_bytes = 0;
  Parallelism par;
  double utilization = 0.9;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_num_seqs = 0;

  kvcache::KvLayout layout_model;  // one whole replica (tp = 1): the model's per-token bytes
  kvcache::KvLayout layout_gpu;    // one GPU of a rank
  model::WeightBreakdown weights;
  model::Placement placement;
  int64_t weights_per_gpu = 0;
  int64_t experts_per_gpu = 0;     // routed-expert bytes per GPU (the rest is replicated per rank)

  model::ActivationEstimate activations;
  bool reserve_given = false;
  int64_t runtime_overhead = 0;
  int64_t reserve = 0;             // activations + runtime overhead, or as given
  int64_t usable_bytes = 0;        // ceil(memory x utilization)
  int64_t kv_budget = 0;           // may be negative: nothing fits
  kvcache::KvPool pool;            // one GPU = one rank's pool (all GPUs of a rank agree)
  int64_t max_concurrency_per_rank = 0;
  int64_t max_concurrency_total = 0;
  std::vector<std::string> assumptions;
  // Set when the weights are computed in a preset's published scheme: the checkpoint to hold
  // the computed total against. Both figures are reported; neither is adjusted to the other.
  std::optional<model::PublishedCheckpoint> published;

  int64_t published_diff_bytes() const {
    return published ? weights.total_bytes() - published->total_bytes : 0;
  }
  double published_diff_pct() const {
    return published ? 100.0 * static_cast<double>(published_diff_bytes()) /
                           static_cast<double>(published->total_bytes)
                     : 0.0;
  }
  bool fits() const { return max_concurrency_per_rank > 0; }
};

Result compute_plan(const Options& options);

// --find-min-gpus: plans TP n (or DEP n) for n = 1, 2, ... and stops at the first that holds
// one whole sequence. Every count tried before it is listed with why it fell short.
struct GpuCountTrial {
  int num_gpus = 0;
  std::string layout_error;       // why the layout cannot run; empty when it can
  int64_t longest_fitting_tokens = 0;  // otherwise: the longest sequence its pool holds
};
struct MinGpuSearch {
  std::string layout;  // "tp" or "dep"
  std::vector<GpuCountTrial> tried;
  Result plan;         // the plan at the fewest GPUs
};
constexpr int kMaxSearchGpus = 1024;
MinGpuSearch find_min_gpus(const Options& options);

std::string commas(int64_t n);  // 1234567 -> "1,234,567"
std::string render_table(const Result& result);
nlohmann::json render_json(const Result& result);
std::string render_search_table(const MinGpuSearch& search);
nlohmann::json render_search_json(const MinGpuSearch& search);

}  // namespace fp4::cli::plan
