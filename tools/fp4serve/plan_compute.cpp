// Resolves `fp4serve plan` flags into the inputs of the sizing functions and runs them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>

#include "core/check.h"
#include "core/int_math.h"
#include "kvcache/cache_dtype.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "tools/fp4serve/plan.h"

namespace fp4::cli::plan {
namespace {

using kvcache::CacheDType;

std::string gb_text(int64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

// A petabyte per GPU: far beyond any device, far below where GB x 1e9 leaves int64.
constexpr double kMaxGbFlag = 1e6;

// Converting a GB flag to bytes is undefined for NaN, infinities and values past int64, so
// every one is checked here first, naming the flag as parse_byte_size does.
int64_t gb_flag_bytes(double gb, std::string_view flag, bool zero_allowed) {
  FP4_CHECK(std::isfinite(gb) && (zero_allowed ? gb >= 0 : gb > 0) && gb <= kMaxGbFlag,
            "{} {} is not a memory size; expected a finite number of GB (1 GB = 10^9 bytes), "
            "{} and at most {}", flag, gb, zero_allowed ? "0 or more" : "more than 0",
            commas(static_cast<int64_t>(kMaxGbFlag)));
  return static_cast<int64_t>(std::llround(gb * 1e9));
}

// Tokens per step and sequences per step multiply model widths in the activation estimate;
// past this the products leave int64, and no engine schedules a step this large.
constexpr int64_t kMaxStepSize = int64_t{1} << 30;

struct ResolvedModel {
  model::ModelConfig config;
  std::string name;
  const model::ModelPreset* preset = nullptr;
};

ResolvedModel resolve_model(const Options& o) {
  ResolvedModel m;
  std::string path = o.model;
  if (path.empty()) {
    FP4_CHECK(o.checkpoint.has_value(), "--model is required: a config.json path or one of {}",
              model::model_preset_names());
    path = *o.checkpoint;
  }
  if ((m.preset = model::find_model_preset(path)) != nullptr) {
    m.config = model::parse_model_config(std::string(m.preset->config_json),
                                         "preset " + std::string(m.preset->name));
    m.name = std::string(m.preset->display_name);
    return m;
  }
  std::error_code ec;
  FP4_CHECK(std::filesystem::exists(path, ec), "--model '{}' is neither a file nor a built-in "
            "preset ({})", path, model::model_preset_names());
  m.config = model::load_model_config(path);
  m.name = m.config.architecture.empty() ? path : m.config.architecture;
  return m;
}

// "routed experts nvfp4; attention, index branch mxfp8; ..." from the counted groups.
std::string describe_formats(const model::WeightBreakdown& w) {
  std::vector<std::pair<model::WeightFormat, std::string>> by_format;
  for (const auto& g : w.groups) {
    const std::string cls(weight_class_name(g.cls));
    auto it = std::find_if(by_format.begin(), by_format.end(),
                           [&](const auto& e) { return e.first == g.format; });
    if (it == by_format.end()) {
      by_format.push_back({g.format, cls});
    } else if (it->second.find(cls) == std::string::npos) {
      it->second += ", " + cls;
    }
  }
  std::string out;
  for (const auto& [format, classes] : by_format) {
    out += fmt::format("{}{} {}", out.empty() ? "" : "; ", classes, weight_format_name(format));
  }
  return out;
}

model::WeightBreakdown resolve_weights(const Options& o, const ResolvedModel& m,
                                       std::optional<model::QuantScheme>& scheme,
                                       std::vector<std::string>& notes) {
  FP4_CHECK(!(o.checkpoint && o.weights_bytes), "give either --checkpoint or --weights-bytes, "
            "not both");
  if (o.checkpoint) {
    FP4_CHECK(!o.quantization, "--quantization describes computed weights; with --checkpoint the "
              "sizes come from the safetensors headers");
    model::WeightBreakdown w = model::scan_checkpoint(*o.checkpoint, m.config);
    notes.push_back(fmt::format("weights: sizes from the safetensors headers of {} (tensor data "
                                "bytes; MTP tensors are not loaded for serving)", *o.checkpoint));
    return w;
  }
  if (o.quantization) {
    scheme = model::parse_quant_scheme(*o.quantization);
  } else {
    scheme = m.preset ? m.preset->scheme : model::QuantScheme::kBF16;
  }
  model::WeightBreakdown computed = model::count_weights(m.config, *scheme);
  const std::string_view why =
      o.quantization ? "as given" : (m.preset ? "the published checkpoint's" : "the default");
  notes.push_back(fmt::format(
      "quantization {} ({}{}): {}. MXFP8 = 32 E4M3 bytes + 1 UE8M0 scale per 32 weights; NVFP4 "
      "= 8 bytes of E2M1 codes + 1 E4M3 scale per 16 weights, plus two FP32 per-tensor scales",
      quant_scheme_name(*scheme), why,
      m.preset && !o.quantization ? fmt::format(", {}", m.preset->checkpoint.repository) : "",
      describe_formats(computed)));
  if (o.weights_bytes) {
    const int64_t declared = parse_byte_size(*o.weights_bytes, "--weights-bytes");
    notes.push_back(fmt::format("weights: declared total {}; the routed experts are counted from "
                                "the config ({}), the rest is split like attention",
                                gb_text(declared),
                                gb_text(computed.bytes_of(model::WeightClass::kRoutedExperts))));
    return model::declared_weights(computed, declared);
  }
  notes.push_back("weights: counted from config.json; the vision tower and MTP/draft heads are "
                  "not counted (plain text serving does not need MTP; see --checkpoint)");
  return computed;
}

}  // namespace

Result compute_plan(const Options& o) {
  // Numeric flags are checked before anything uses them: a cast or product of an
  // out-of-range value is undefined, not an error.
  const int64_t gpu_memory_bytes =
      o.gpu_memory_gb ? gb_flag_bytes(*o.gpu_memory_gb, "--gpu-memory-gb", false) : 0;
  const int64_t reserve_bytes =
      o.reserve_gb ? gb_flag_bytes(*o.reserve_gb, "--reserve-gb", true) : 0;
  const int64_t runtime_overhead_bytes =
      gb_flag_bytes(o.runtime_overhead_gb, "--runtime-overhead-gb", true);
  FP4_CHECK(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1,
            "--gpu-memory-utilization {} is not a fraction; expected more than 0 and at most 1",
            o.gpu_memory_utilization);
  for (const auto& [value, flag] :
       {std::pair{o.max_num_batched_tokens, "--max-num-batched-tokens"},
        {o.max_num_seqs, "--max-num-seqs"}}) {
    FP4_CHECK(value > 0 && value <= kMaxStepSize, "{} {} is out of range; expected 1 to {}", flag,
              value, kMaxStepSize);
  }

  Result r;
  const ResolvedModel m = resolve_model(o);
  r.config = m.config;
  r.model_name = m.name;
  r.model_source = m.preset ? "preset " + std::string(m.preset->name) : m.config.source;
  std::vector<std::string>& notes = r.assumptions;

  // A GPU without a preset is fine once its memory is given.
  const GpuPreset* gpu = o.gpu_memory_gb ? lookup_gpu(o.gpu) : &find_gpu(o.gpu);
  r.gpu_name = gpu != nullptr ? std::string(gpu->name) : o.gpu;
  r.gpu_label = gpu != nullptr ? std::string(gpu->label) : o.gpu;
  r.gpu_published_gb = gpu != nullptr ? gpu->published_gb : 0.0;
  if (o.gpu_memory_gb) {
    r.gpu_memory_bytes = gpu_memory_bytes;
    notes.push_back(
        fmt::format("GPU memory {} per GPU (--gpu-memory-gb)", gb_text(r.gpu_memory_bytes)));
  } else {
    r.gpu_memory_bytes = gpu->memory_bytes;
    notes.push_back(fmt::format("GPU memory {} per GPU: {} (published {:g} GB)",
                                gb_text(r.gpu_memory_bytes), gpu->memory_source,
                                gpu->published_gb));
  }
  r.par = resolve_parallelism(o, r.config);
  r.placement = {r.par.tp, r.par.ep};
  const int64_t experts_per_gpu =
      r.config.is_moe() ? ceil_div(r.config.num_experts, r.par.ep) : 0;
  notes.push_back(fmt::format(
      "parallelism {}: {} data-parallel rank(s), each with its own KV pool and its own copy of "
      "the non-expert weights{}; routed experts spread over {} GPU(s), {} of {} per GPU per MoE "
      "layer", r.par.label(), r.par.dp,
      r.par.tp > 1 ? fmt::format(", split over its {} tensor-parallel GPUs", r.par.tp)
                   : std::string(" on one GPU"),
      r.par.ep, experts_per_gpu, r.config.num_experts));

  r.max_model_len = o.max_model_len ? parse_token_count(*o.max_model_len, "--max-model-len")
                                    : r.config.max_position_embeddings;
  FP4_CHECK(r.max_model_len > 0, "{} has no max_position_embeddings; give --max-model-len",
            r.model_source);
  FP4_CHECK(r.config.max_position_embeddings == 0 ||
                r.max_model_len <= r.config.max_position_embeddings,
            "--max-model-len {} exceeds the model's maximum context, max_position_embeddings = "
            "{} ({})", r.max_model_len, r.config.max_position_embeddings, r.model_source);

  // KV cache.
  kvcache::KvDTypes dtypes;
  dtypes.kv = kvcache::parse_cache_dtype(o.kv_cache_dtype, "--kv-cache-dtype", false);
  dtypes.index = kvcache::parse_cache_dtype(o.index_cache_dtype, "--index-cache-dtype", true);
  const kvcache::KvGeometry geometry = model::kv_geometry(r.config);
  r.layout_model = kvcache::kv_layout(geometry, dtypes, 1);
  r.layout_gpu = kvcache::kv_layout(geometry, dtypes, r.par.tp);
  notes.push_back(fmt::format(
      "KV cache: {}-token pages (one MSA block); a sequence of L tokens takes ceil(L/{}) pages, "
      "and one page id covers the main K/V and the index-K pools of every layer",
      geometry.page_tokens, geometry.page_tokens));
  if (geometry.num_sparse_layers == 0) {
    notes.push_back("no sparse (MSA) layers, so no index cache");
  } else if (dtypes.index == CacheDType::kNone) {
    notes.push_back("index cache NOT counted (--index-cache-dtype none): this is how the launch "
                    "report's per-token figures are computed, but an MSA deployment needs it");
  } else {
    notes.push_back(fmt::format("index cache {} on the {} sparse layers: one {}-wide key per "
                                "token, replicated on every TP rank", cache_dtype_name(dtypes.index),
                                geometry.num_sparse_layers, geometry.index_head_dim));
  }

  // Weights.
  r.weights = resolve_weights(o, m, r.scheme, notes);
  if (m.preset && !o.checkpoint && !o.weights_bytes && r.scheme == m.preset->scheme) {
    r.published = m.preset->checkpoint;
  }
  r.weights_per_gpu = model::weights_bytes_per_gpu(r.weights, r.placement);
  r.experts_per_gpu =
      model::class_bytes_per_gpu(r.weights, model::WeightClass::kRoutedExperts, r.placement);

  // Memory reserved for activations and the runtime, then the KV budget.
  r.max_num_batched_tokens = o.max_num_batched_tokens;
  r.max_num_seqs = o.max_num_seqs;
  r.activations = model::estimate_activations(
      r.config, {o.max_num_batched_tokens, o.max_num_seqs, r.max_model_len, r.par.tp});
  r.utilization = o.gpu_memory_utilization;
  if (o.reserve_gb) {
    r.reserve_given = true;
    r.reserve = reserve_bytes;
    notes.push_back(fmt::format("reserve {} per GPU for activations and the runtime "
                                "(--reserve-gb)", gb_text(r.reserve)));
  } else {
    r.runtime_overhead = runtime_overhead_bytes;
    r.reserve = r.activations.peak + r.runtime_overhead;
    notes.push_back(fmt::format(
        "reserve {} per GPU = activation peak {} ({} phase of a {}-token step, {} sampled "
        "sequences, balanced expert routing) + runtime overhead {} (CUDA graphs, NCCL and "
        "all-to-all buffers, GEMM workspaces, fragmentation; --runtime-overhead-gb)",
        gb_text(r.reserve), gb_text(r.activations.peak), r.activations.peak_phase,
        o.max_num_batched_tokens, o.max_num_seqs, gb_text(r.runtime_overhead)));
  }
  r.usable_bytes = kvcache::kv_budget_bytes(r.gpu_memory_bytes, r.utilization, 0);
  // Weights that fit with room for less than one sequence still make a plan (0 sequences and
  // the longest length that fits); weights that do not fit at all make none.
  layout_check(r.weights_per_gpu + r.reserve <= r.usable_bytes,
               "the weights do not fit: {} of weights per GPU ({}: {} of non-expert weights + {} "
               "of routed experts) + {} reserve = {}, more than the {} usable per GPU ({} x "
               "gpu-memory-utilization {:g}, {}); use more GPUs, more expert parallelism or a "
               "smaller quantization", gb_text(r.weights_per_gpu), r.par.label(),
               gb_text(r.weights_per_gpu - r.experts_per_gpu), gb_text(r.experts_per_gpu),
               gb_text(r.reserve), gb_text(r.weights_per_gpu + r.reserve),
               gb_text(r.usable_bytes), gb_text(r.gpu_memory_bytes), r.utilization, r.gpu_label);
  r.kv_budget = kvcache::kv_budget_bytes(r.gpu_memory_bytes, r.utilization,
                                         r.weights_per_gpu + r.reserve);
  notes.push_back(fmt::format("gpu-memory-utilization {:g}: the engine takes ceil(memory x {:g}) "
                              "= {} per GPU and gives the KV cache what weights and reserve leave",
                              r.utilization, r.utilization, gb_text(r.usable_bytes)));
  r.pool = kvcache::size_kv_pool(r.layout_gpu, r.kv_budget, r.max_model_len);
  r.max_concurrency_per_rank = r.pool.max_seqs;
  r.max_concurrency_total = r.pool.max_seqs * r.par.dp;
  notes.push_back("every GPU of a rank holds the same pages (the minimum across workers, as in "
                  "vLLM); all ranks are alike, so the total is per-rank x data-parallel ranks");
  return r;
}

MinGpuSearch find_min_gpus(const Options& o) {
  MinGpuSearch search;
  search.layout = *o.find_min_gpus;
  FP4_CHECK(search.layout == "tp" || search.layout == "dep", "--find-min-gpus '{}' is not a "
            "layout; expected tp (one rank, tensor parallel over every GPU) or dep (one rank "
            "per GPU, experts over all of them)", search.layout);
  for (const auto& [given, flag] : {std::pair{o.num_gpus.has_value(), "--num-gpus"},
                                    {o.tp.has_value(), "--tp"}, {o.dp.has_value(), "--dp"},
                                    {o.ep.has_value(), "--ep"}, {o.dep.has_value(), "--dep"}}) {
    FP4_CHECK(!given, "--find-min-gpus chooses the GPU count and layout; leave out {}", flag);
  }
  for (int n = 1; n <= kMaxSearchGpus; ++n) {
    Options trial = o;
    (search.layout == "tp" ? trial.tp : trial.dep) = n;
    try {
      Result r = compute_plan(trial);
      if (r.fits()) {
        search.plan = std::move(r);
        return search;
      }
      search.tried.push_back({n, "", r.pool.tokens});
    } catch (const LayoutError& e) {
      search.tried.push_back({n, e.what(), 0});
    }
  }
  // DEP keeps each sequence on one GPU, so past some count more GPUs stop helping; the
  // longest length seen tells how far off the request is.
  const auto best = std::max_element(search.tried.begin(), search.tried.end(),
                                     [](const auto& a, const auto& b) {
                                       return a.longest_fitting_tokens < b.longest_fitting_tokens;
                                     });
  fail("--find-min-gpus {}: no layout of up to {} GPUs holds one sequence of --max-model-len {} "
       "tokens; the longest any of them holds is {} tokens ({} GPUs)",
       search.layout, kMaxSearchGpus, o.max_model_len.value_or("max_position_embeddings"),
       commas(best->longest_fitting_tokens), best->num_gpus);
}

}  // namespace fp4::cli::plan
