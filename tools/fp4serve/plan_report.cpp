// The two faces of a plan: a table for people and JSON for scripts. Both print the same
// numbers, all of them computed in plan_compute.cpp.
#include <fmt/format.h>

#include <set>

#include "kvcache/cache_dtype.h"
#include "tools/fp4serve/plan.h"

namespace fp4::cli::plan {
namespace {

using model::Sharding;
using model::WeightClass;

double in_gb(int64_t bytes) { return static_cast<double>(bytes) / 1e9; }

std::string class_formats(const model::WeightBreakdown& w, WeightClass cls) {
  std::set<std::string> names;
  for (const auto& g : w.groups) {
    if (g.cls != cls) continue;
    names.insert(g.format == model::WeightFormat::kStored ? g.stored_dtype
                                                          : std::string(weight_format_name(g.format)));
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "+") + n;
  return out;
}

std::string class_split(const Result& r, WeightClass cls) {
  std::set<std::string> kinds;
  for (const auto& g : r.weights.groups) {
    if (g.cls != cls) continue;
    switch (g.sharding) {
      case Sharding::kReplicated: kinds.insert("replicated"); break;
      case Sharding::kTensorParallel:
      case Sharding::kHeads:
        kinds.insert(r.par.tp == 1 ? "replicated" : fmt::format("split over TP{}", r.par.tp));
        break;
      case Sharding::kExperts: kinds.insert(fmt::format("experts over {} GPUs", r.par.ep)); break;
      case Sharding::kNotLoaded: kinds.insert("not loaded"); break;
    }
  }
  std::string out;
  for (const auto& k : kinds) out += (out.empty() ? "" : ", ") + k;
  return out;
}

constexpr WeightClass kClasses[] = {
    WeightClass::kEmbedding, WeightClass::kAttention,     WeightClass::kIndex,
    WeightClass::kRouter,    WeightClass::kSharedExpert,  WeightClass::kRoutedExperts,
    WeightClass::kDenseMlp,  WeightClass::kLmHead,        WeightClass::kNorms,
    WeightClass::kMtp,       WeightClass::kOther};

bool has_class(const model::WeightBreakdown& w, WeightClass cls) {
  for (const auto& g : w.groups) {
    if (g.cls == cls) return true;
  }
  return false;
}

std::string concurrency_line(const Result& r) {
  return fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x",
                     commas(r.max_model_len), r.pool.concurrency);
}

}  // namespace

std::string commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return n < 0 ? "-" + digits : digits;
}

std::string render_table(const Result& r) {
  std::string s;
  auto line = [&s](const std::string& text) { s += text + "\n"; };
  const auto& lm = r.layout_model;
  const auto& lg = r.layout_gpu;
  line(fmt::format("fp4serve plan: {} ({})", r.model_name, r.model_source));
  line(fmt::format("deployment: {} x {}, {}, max-model-len {} tokens", r.par.num_gpus(),
                   r.gpu_label, r.par.label(), commas(r.max_model_len)));
  line("\nAssumptions");
  for (const auto& a : r.assumptions) line("  * " + a);

  line("\nKV cache per token (whole model, one replica)");
  line(fmt::format("  {:<16} {:>6}  {:<6} {:>14}  {:<6} {:>16} {:>10}", "layer kind", "layers",
                   "K/V", "K/V B/layer", "index", "index B/layer", "B/token"));
  const std::pair<const char*, const kvcache::LayerKindBytes*> kinds[] = {
      {"dense attention", &lm.dense}, {"sparse (MSA)", &lm.sparse}};
  for (const auto& [name, k] : kinds) {
    if (k->layers == 0) continue;
    const bool sparse = k == &lm.sparse;
    line(fmt::format("  {:<16} {:>6}  {:<6} {:>14}  {:<6} {:>16} {:>10}", name, k->layers,
                     cache_dtype_name(lm.dtypes.kv), commas(k->kv),
                     sparse ? std::string(cache_dtype_name(lm.dtypes.index)) : "-",
                     sparse ? commas(k->index) : "-", commas(k->layers * (k->kv + k->index))));
  }
  line(fmt::format("  main K/V {} B/token + index cache {} B/token = {} B/token",
                   commas(lm.kv_bytes_per_token()), commas(lm.index_bytes_per_token()),
                   commas(lm.bytes_per_token())));
  line(fmt::format("  per GPU (TP{}, {} KV head(s) per GPU): {} + {} = {} B/token; one page "
                   "({} tokens, all layers) = {} B", r.par.tp, lg.kv_heads_per_gpu,
                   commas(lg.kv_bytes_per_token()), commas(lg.index_bytes_per_token()),
                   commas(lg.bytes_per_token()), lg.geometry.page_tokens,
                   commas(r.pool.page_bytes)));

  line(fmt::format("\nWeights ({})", r.weights.origin));
  line(fmt::format("  {:<15} {:>13}  {:<12} {:>10} {:>11}  {}", "class", "params (B)", "format",
                   "total GB", "per GPU GB", "split"));
  for (WeightClass cls : kClasses) {
    if (!has_class(r.weights, cls)) continue;
    line(fmt::format("  {:<15} {:>13.3f}  {:<12} {:>10.3f} {:>11.3f}  {}", weight_class_name(cls),
                     static_cast<double>(r.weights.params_of(cls)) / 1e9,
                     class_formats(r.weights, cls), in_gb(r.weights.bytes_of(cls)),
                     in_gb(model::class_bytes_per_gpu(r.weights, cls, r.placement)),
                     class_split(r, cls)));
  }
  line(fmt::format("  {:<15} {:>13.3f}  {:<12} {:>10.3f} {:>11.3f}", "total",
                   static_cast<double>(r.weights.total_params()) / 1e9, "",
                   in_gb(r.weights.total_bytes()), in_gb(r.weights_per_gpu)));
  line(fmt::format("  per GPU: {:.2f} GB of non-expert weights (every rank holds a copy{}) + "
                   "{:.2f} GB of routed experts = {:.2f} GB",
                   in_gb(r.weights_per_gpu - r.experts_per_gpu),
                   r.par.tp > 1 ? fmt::format(", split over its {} GPUs", r.par.tp) : "",
                   in_gb(r.experts_per_gpu), in_gb(r.weights_per_gpu)));
  if (r.published) {
    const auto& p = *r.published;
    const bool in_bytes = p.total_as_published.find(commas(p.total_bytes)) != std::string::npos;
    line(fmt::format("  published checkpoint {}: {}{}{}", p.repository, p.total_as_published,
                     in_bytes ? "" : fmt::format(" = {} B", commas(p.total_bytes)),
                     p.shards > 0 ? fmt::format(" in {} shards", p.shards) : ""));
    line(fmt::format("  computed {:.2f} GB vs published {:.2f} GB: {:+.2f} GB ({:+.2f}%)",
                     in_gb(r.weights.total_bytes()), in_gb(p.total_bytes),
                     in_gb(r.published_diff_bytes()), r.published_diff_pct()));
  }

  line("\nMemory per GPU");
  line(fmt::format("  {:<44} {:>10.2f} GB", "GPU memory", in_gb(r.gpu_memory_bytes)));
  line(fmt::format("  {:<44} {:>10.2f} GB",
                   fmt::format("usable (x {:g} gpu-memory-utilization)", r.utilization),
                   in_gb(r.usable_bytes)));
  line(fmt::format("  {:<44} {:>10.2f} GB", "- weights", in_gb(r.weights_per_gpu)));
  const std::string reserve_label =
      r.reserve_given ? std::string("- reserve (given)")
                      : fmt::format("- reserve (activations {:.2f} + runtime {:.2f})",
                                    in_gb(r.activations.peak), in_gb(r.runtime_overhead));
  line(fmt::format("  {:<44} {:>10.2f} GB", reserve_label, in_gb(r.reserve)));
  line(fmt::format("  {:<44} {:>10.2f} GB", "= KV cache budget", in_gb(r.kv_budget)));

  line(fmt::format("\nCapacity per data-parallel rank ({} rank(s); each logs its own lines)",
                   r.par.dp));
  line(fmt::format("  GPU KV cache size: {} tokens", commas(r.pool.tokens)));
  line("  " + concurrency_line(r));
  line(fmt::format("  {} pages of {} B; a {}-token sequence takes {} pages", commas(r.pool.num_pages),
                   commas(r.pool.page_bytes), commas(r.max_model_len), commas(r.pool.pages_per_seq)));
  line(fmt::format("  max concurrent sequences: {} per rank x {} rank(s) = {}",
                   r.max_concurrency_per_rank, r.par.dp, r.max_concurrency_total));
  if (!r.fits()) {
    line(fmt::format("  DOES NOT FIT: one {}-token sequence needs {} pages; the largest length "
                     "that fits is {} tokens", commas(r.max_model_len),
                     commas(r.pool.pages_per_seq), commas(r.pool.tokens)));
  }
  return s;
}

nlohmann::json render_json(const Result& r) {
  using nlohmann::json;
  const auto& lm = r.layout_model;
  const auto& lg = r.layout_gpu;
  json kinds = json::array();
  for (const auto* k : {&lm.dense, &lm.sparse}) {
    if (k->layers == 0) continue;
    kinds.push_back({{"kind", k == &lm.sparse ? "sparse" : "dense"},
                     {"layers", k->layers},
                     {"kv_bytes_per_token_per_layer", k->kv},
                     {"index_bytes_per_token_per_layer", k->index}});
  }
  json classes = json::array();
  for (WeightClass cls : kClasses) {
    if (!has_class(r.weights, cls)) continue;
    classes.push_back({{"class", weight_class_name(cls)},
                       {"params", r.weights.params_of(cls)},
                       {"format", class_formats(r.weights, cls)},
                       {"bytes_total", r.weights.bytes_of(cls)},
                       {"bytes_per_gpu", model::class_bytes_per_gpu(r.weights, cls, r.placement)},
                       {"split", class_split(r, cls)}});
  }
  json out = {
      {"model", {{"name", r.model_name}, {"source", r.model_source},
                 {"layers", r.config.num_layers},
                 {"dense_attention_layers", lm.dense.layers},
                 {"sparse_attention_layers", lm.sparse.layers},
                 {"moe_layers", r.config.count_moe_layers()}}},
      {"gpu", {{"name", r.gpu_name}, {"label", r.gpu_label}, {"count", r.par.num_gpus()},
               {"memory_bytes", r.gpu_memory_bytes}, {"published_gb", r.gpu_published_gb}}},
      {"parallelism", {{"label", r.par.label()}, {"dp", r.par.dp}, {"tp", r.par.tp},
                       {"ep", r.par.ep}, {"num_gpus", r.par.num_gpus()}}},
      {"max_model_len", r.max_model_len},
      {"page_tokens", lm.geometry.page_tokens},
      {"kv_cache_dtype", cache_dtype_name(lm.dtypes.kv)},
      {"index_cache_dtype", cache_dtype_name(lm.dtypes.index)},
      {"kv_bytes_per_token", lm.kv_bytes_per_token()},
      {"index_cache_bytes_per_token", lm.index_bytes_per_token()},
      {"cache_bytes_per_token", lm.bytes_per_token()},
      {"kv_bytes_per_token_per_gpu", lg.kv_bytes_per_token()},
      {"index_cache_bytes_per_token_per_gpu", lg.index_bytes_per_token()},
      {"layer_kinds", kinds},
      {"quantization", r.scheme ? json(quant_scheme_name(*r.scheme)) : json(nullptr)},
      {"weights_source", r.weights.origin},
      {"weights", classes},
      {"weights_params_total", r.weights.total_params()},
      {"weights_bytes_total", r.weights.total_bytes()},
      {"weights_bytes_published", r.published ? json(r.published->total_bytes) : json(nullptr)},
      {"weights_published_checkpoint",
       r.published ? json(r.published->repository) : json(nullptr)},
      {"weights_published_diff_bytes",
       r.published ? json(r.published_diff_bytes()) : json(nullptr)},
      {"weights_published_diff_pct", r.published ? json(r.published_diff_pct()) : json(nullptr)},
      {"weights_bytes_per_gpu", r.weights_per_gpu},
      {"weights_bytes_per_gpu_replicated", r.weights_per_gpu - r.experts_per_gpu},
      {"weights_bytes_per_gpu_expert_sharded", r.experts_per_gpu},
      {"gpu_memory_utilization", r.utilization},
      {"usable_bytes_per_gpu", r.usable_bytes},
      {"reserve", {{"bytes", r.reserve}, {"given", r.reserve_given},
                   {"activation_bytes", r.activations.peak},
                   {"activation_peak_phase", r.activations.peak_phase},
                   {"runtime_overhead_bytes", r.runtime_overhead},
                   {"max_num_batched_tokens", r.max_num_batched_tokens},
                   {"max_num_seqs", r.max_num_seqs}}},
      {"kv_budget_bytes_per_gpu", r.kv_budget},
      {"page_bytes_per_gpu", r.pool.page_bytes},
      {"pages_per_rank", r.pool.num_pages},
      {"kv_cache_tokens_per_rank", r.pool.tokens},
      {"pages_per_sequence", r.pool.pages_per_seq},
      {"concurrency_per_rank", r.pool.concurrency},
      {"max_concurrency_per_rank", r.max_concurrency_per_rank},
      {"max_concurrency_total", r.max_concurrency_total},
      {"fits", r.fits()},
      {"vllm_log_lines", {fmt::format("GPU KV cache size: {} tokens", commas(r.pool.tokens)),
                          concurrency_line(r)}},
      {"assumptions", r.assumptions},
  };
  return out;
}

std::string render_search_table(const MinGpuSearch& search) {
  const Result& r = search.plan;
  std::string s = fmt::format("Fewest GPUs ({} layout) for one {}-token sequence: {} x {} ({})\n",
                              search.layout == "tp" ? "TP" : "DEP", commas(r.max_model_len),
                              r.par.num_gpus(), r.gpu_label, r.par.label());
  for (const auto& t : search.tried) {
    s += fmt::format("  {} GPU(s): {}\n", t.num_gpus,
                     t.layout_error.empty()
                         ? fmt::format("0 sequences; the longest that fits is {} tokens",
                                       commas(t.longest_fitting_tokens))
                         : t.layout_error);
  }
  s += fmt::format("  {} GPU(s): {} sequence(s) fit; the plan follows\n\n", r.par.num_gpus(),
                   r.max_concurrency_total);
  return s + render_table(r);
}

nlohmann::json render_search_json(const MinGpuSearch& search) {
  nlohmann::json tried = nlohmann::json::array();
  for (const auto& t : search.tried) {
    tried.push_back({{"num_gpus", t.num_gpus},
                     {"layout_error", t.layout_error.empty() ? nlohmann::json(nullptr)
                                                             : nlohmann::json(t.layout_error)},
                     {"longest_fitting_tokens", t.longest_fitting_tokens}});
  }
  nlohmann::json out = render_json(search.plan);
  out["min_gpu_search"] = {{"layout", search.layout},
                           {"num_gpus", search.plan.par.num_gpus()},
                           {"tried", tried}};
  return out;
}

}  // namespace fp4::cli::plan
