// `fp4serve plan`: the command line of the capacity planner. The arithmetic is in
// plan_compute.cpp and the layers below it; this file only maps flags onto plan::Options.
#include <fmt/format.h>

#include <memory>

#include "tools/fp4serve/commands.h"
#include "tools/fp4serve/plan.h"

namespace fp4::cli {
namespace {

// CLI11 2.1 cannot bind std::optional, so optional flags land here and are copied over when
// their option was actually given.
struct RawFlags {
  std::string checkpoint, weights_bytes, quantization, max_model_len, find_min_gpus;
  double gpu_memory_gb = 0, reserve_gb = 0;
  int num_gpus = 0, tp = 0, dp = 0, ep = 0, dep = 0;
  bool json = false;
};

template <typename T>
void copy_if_given(const CLI::Option* option, const T& value, std::optional<T>& target) {
  if (option->count() > 0) target = value;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<plan::Options>();
  auto raw = std::make_shared<RawFlags>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Plan a deployment: weights and KV bytes per GPU and how many sequences of "
              "--max-model-len tokens fit at once");
  sub->add_option("--model", o->model,
                  "config.json (or a directory holding one), or a preset: minimax-m3, "
                  "minimax-m3.1-flash");
  auto* checkpoint = sub->add_option("--checkpoint", raw->checkpoint,
                                     "Directory of *.safetensors: weight sizes from their "
                                     "headers (its config.json is used when --model is absent)");
  auto* weights_bytes = sub->add_option("--weights-bytes", raw->weights_bytes,
                                        "Declared checkpoint size, e.g. 250116419880 or 451.5GB");
  auto* quantization = sub->add_option("--quantization", raw->quantization,
                                       "Computed weights: bf16, mxfp8 or nvfp4-experts (default: "
                                       "the preset's published checkpoint, bf16 for a path)");
  sub->add_option("--kv-cache-dtype", o->kv_cache_dtype, "Main K/V cache: bf16, fp8 or nvfp4")
      ->capture_default_str();
  sub->add_option("--index-cache-dtype", o->index_cache_dtype,
                  "MSA index-K cache: bf16, fp8, nvfp4, or none to leave it out of the budget")
      ->capture_default_str();
  sub->add_option("--gpu", o->gpu, "h100, h200, b200, b300, gb300 or mi355x")
      ->capture_default_str();
  auto* gpu_memory = sub->add_option("--gpu-memory-gb", raw->gpu_memory_gb,
                                     "Memory per GPU in GB (1e9 bytes), replacing the preset's");
  auto* num_gpus = sub->add_option("--num-gpus", raw->num_gpus, "GPUs in the deployment");
  auto* tp = sub->add_option("--tp", raw->tp, "Tensor-parallel GPUs per data-parallel rank");
  auto* dp = sub->add_option("--dp", raw->dp, "Data-parallel ranks (each its own KV pool)");
  auto* ep = sub->add_option("--ep", raw->ep,
                             "GPUs the routed experts are spread over (default: all)");
  auto* dep = sub->add_option("--dep", raw->dep,
                              "Data-parallel attention + expert parallel over N GPUs: "
                              "--dp N --tp 1 --ep N");
  auto* max_model_len = sub->add_option("--max-model-len", raw->max_model_len,
                                        "Tokens per sequence: 262144, 256k, 1m (k = 1024; "
                                        "default: max_position_embeddings)");
  sub->add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                  "Fraction of GPU memory the engine may use")
      ->capture_default_str();
  auto* reserve = sub->add_option("--reserve-gb", raw->reserve_gb,
                                  "Activation + runtime reserve per GPU in GB, replacing the "
                                  "estimate");
  sub->add_option("--runtime-overhead-gb", o->runtime_overhead_gb,
                  "Non-activation runtime memory per GPU in the estimated reserve (CUDA graphs, "
                  "communication buffers, workspaces)")
      ->capture_default_str();
  sub->add_option("--max-num-batched-tokens", o->max_num_batched_tokens,
                  "Tokens in the largest step; sizes the activation estimate")
      ->capture_default_str();
  sub->add_option("--max-num-seqs", o->max_num_seqs,
                  "Sequences sampled in one step; sizes the logits in the activation estimate")
      ->capture_default_str();
  auto* find_min_gpus = sub->add_option("--find-min-gpus", raw->find_min_gpus,
                                        "tp or dep: try 1, 2, 3, ... GPUs in that layout and plan "
                                        "the fewest that hold one whole sequence");
  sub->add_flag("--json", raw->json, "Print JSON instead of the table");

  sub->callback([=, &exit_code] {
    plan::Options options = *o;
    copy_if_given(checkpoint, raw->checkpoint, options.checkpoint);
    copy_if_given(weights_bytes, raw->weights_bytes, options.weights_bytes);
    copy_if_given(quantization, raw->quantization, options.quantization);
    copy_if_given(max_model_len, raw->max_model_len, options.max_model_len);
    copy_if_given(gpu_memory, raw->gpu_memory_gb, options.gpu_memory_gb);
    copy_if_given(reserve, raw->reserve_gb, options.reserve_gb);
    copy_if_given(num_gpus, raw->num_gpus, options.num_gpus);
    copy_if_given(tp, raw->tp, options.tp);
    copy_if_given(dp, raw->dp, options.dp);
    copy_if_given(ep, raw->ep, options.ep);
    copy_if_given(dep, raw->dep, options.dep);
    copy_if_given(find_min_gpus, raw->find_min_gpus, options.find_min_gpus);

    exit_code = 0;
    if (options.find_min_gpus) {
      const plan::MinGpuSearch search = plan::find_min_gpus(options);
      if (raw->json) {
        fmt::print("{}\n", plan::render_search_json(search).dump(2));
      } else {
        fmt::print("{}", plan::render_search_table(search));
      }
      return;
    }
    const plan::Result result = plan::compute_plan(options);
    if (raw->json) {
      fmt::print("{}\n", plan::render_json(result).dump(2));
    } else {
      fmt::print("{}", plan::render_table(result));
    }
    if (!result.fits()) {
      fmt::print(stderr, "fp4serve plan: not even one {}-token sequence fits per rank\n",
                 result.max_model_len);
      exit_code = 1;
    }
  });
}

}  // namespace fp4::cli
