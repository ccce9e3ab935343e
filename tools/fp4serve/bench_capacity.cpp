// `fp4serve bench capacity`: how many 256K-token sequences the serving engine really runs at
// once on this GPU, against what `fp4serve plan` predicts for the same configuration.
//
// The model has MiniMax-M3.1-Flash's full width (its preset's config: hidden 6144, 64/4 heads,
// 128 experts, the 200K vocabulary, the first three layers dense) with as many layers as fit
// beside one 256K-token cache, and random weights: projections with BF16 values (held in BF16,
// as a checkpoint's BF16 or MXFP8 tensors are), routed experts in NVFP4. The weights are made
// one layer at a time, placed on the GPU, and their host pages handed back to the system, so the
// host needs memory for one layer, not for the model.
//
// The engine sizes its pool as `fp4serve serve` does (engine::plan_serving_pool). Requests of
// 256K tokens each (prompt + output) arrive together; the first decodes long enough that every
// request that fits is admitted while it still runs. The count reported is the largest number
// of requests running in one step. The planner gets the same config, the bytes the weights take
// on the GPU (it would otherwise count them in the checkpoint's formats) and the GPU's memory.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/kv_pool_plan.h"
#include "model/presets.h"
#include "tools/fp4serve/bench_capacity.h"
#include "tools/fp4serve/plan.h"

namespace fp4::cli {
namespace {

using nlohmann::json;
constexpr const char* kPreset = "minimax-m3.1-flash";

// The preset's config.json cut to `layers` layers (its per-layer lists too).
json config_with_layers(int64_t layers) {
  const model::ModelPreset* preset = model::find_model_preset(kPreset);
  FP4_CHECK(preset != nullptr, "the {} preset is missing", kPreset);
  json root = json::parse(preset->config_json);
  json& text = root["text_config"];
  text["num_hidden_layers"] = layers;
  auto cut = [&](json& list) {
    FP4_CHECK(list.is_array() && std::ssize(list) >= layers, "the preset's per-layer list is shorter than {}", layers);
    list.erase(list.begin() + layers, list.end());
  };
  cut(text["moe_layer_freq"]);
  json& sparse = text["sparse_attention_config"];
  for (const char* key : {"sparse_attention_freq", "sparse_disable_index_value"}) cut(sparse[key]);
  return root;
}

// Random values from one LCG per chunk of 1 MiB, filled on every core: gigabytes per layer.
void fill_random(uint8_t* bytes, int64_t n, uint64_t seed) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t x = seed ^ (static_cast<uint64_t>(c) * 0x9E3779B97F4A7C15ull);
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::memcpy(bytes + i, &x, static_cast<size_t>(std::min<int64_t>(8, end - i)));
      }
    }
  });
}

class RandomWeights {
 public:
  explicit RandomWeights(uint64_t seed) : seed_(seed) {}

  // BF16 values uniform in about +-1/sqrt(in): random bits with the sign and a fixed exponent.
  model::LinearWeight bf16_linear(int64_t out, int64_t in) {
    model::LinearWeight w{.w = std::vector<float>(static_cast<size_t>(out * in)), .out = out, .in = in,
                          .format = "bf16"};
    fill_random(reinterpret_cast<uint8_t*>(w.w.data()), out * in * 4, ++seed_);
    const int exponent = 127 - 1 - static_cast<int>(std::ceil(0.5 * std::log2(double(in))));
    parallel_for(out * in, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const uint32_t bits = std::bit_cast<uint32_t>(w.w[i]);
        w.w[i] = std::bit_cast<float>((bits & 0x807F0000u) | (static_cast<uint32_t>(exponent) << 23));
      }
    });
    return w;
  }
  std::vector<float> norm(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.1f); }
  // NVFP4 stacks: random codes, E4M3 block scales in [2^-6, 2^2) so that no value is NaN.
  model::Nvfp4Experts experts(int64_t count, int64_t n, int64_t k) {
    model::Nvfp4Experts s{.values = std::vector<uint8_t>(static_cast<size_t>(count * n * k / 2)),
                          .scales = std::vector<uint8_t>(static_cast<size_t>(count * n * k / 16)),
                          .global_scales = std::vector<float>(static_cast<size_t>(count), 1.0f / 64), .n = n, .k = k};
    fill_random(s.values.data(), std::ssize(s.values), ++seed_);
    fill_random(s.scales.data(), std::ssize(s.scales), ++seed_);
    parallel_for(std::ssize(s.scales), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) s.scales[i] = static_cast<uint8_t>(0x18 + (s.scales[i] >> 4) * 2);
    });
    return s;
  }

 private:
  uint64_t seed_;
};

model::LayerWeights random_layer(const model::ModelConfig& c, int64_t l, RandomWeights& r) {
  const int64_t h = c.hidden_size, d = c.head_dim, di = c.index_head_dim;
  model::LayerWeights layer;
  layer.sparse = c.sparse_layer[l];
  layer.moe = c.moe_layer[l];
  layer.input_norm = r.norm(h);
  layer.post_attention_norm = r.norm(h);
  model::AttentionWeights& a = layer.attn;
  a.q = r.bf16_linear(c.num_heads * d, h);
  a.k = r.bf16_linear(c.num_kv_heads * d, h);
  a.v = r.bf16_linear(c.num_kv_heads * d, h);
  a.o = r.bf16_linear(h, c.num_heads * d);
  a.q_norm = r.norm(d);
  a.k_norm = r.norm(d);
  if (layer.sparse) {
    a.index_q = r.bf16_linear(c.num_index_heads * di, h);
    a.index_k = r.bf16_linear(di, h);
    a.index_q_norm = r.norm(di);
    a.index_k_norm = r.norm(di);
  }
  if (!layer.moe) {
    const int64_t inter = c.dense_intermediate_size;
    layer.mlp = {r.bf16_linear(inter, h), r.bf16_linear(inter, h), r.bf16_linear(h, inter)};
    return layer;
  }
  model::MoeWeights& m = layer.moe_weights;
  m.router = r.bf16_linear(c.num_experts, h);
  if (c.routing_bias) m.bias = std::vector<float>(static_cast<size_t>(c.num_experts), 0.0f);
  m.nvfp4 = true;
  m.gate = r.experts(c.num_experts, c.moe_intermediate_size, h);
  m.up = r.experts(c.num_experts, c.moe_intermediate_size, h);
  m.down = r.experts(c.num_experts, h, c.moe_intermediate_size);
  m.has_shared = c.shared_intermediate_size > 0;
  if (m.has_shared) {
    const int64_t inter = c.shared_intermediate_size;
    m.shared = {r.bf16_linear(inter, h), r.bf16_linear(inter, h), r.bf16_linear(h, inter)};
  }
  return layer;
}

// The host pages of a tensor already on the GPU go back to the system; the vector keeps its
// address and size (the engine finds the device copy by them) but reads as zeros from now on.
// Safe once placed: Backend::copy_from_host returns when the source may be reused.
template <typename T>
void release_pages(std::vector<T>& v) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(v.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(v.data() + v.size())) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void release_layer(model::LayerWeights& l) {
  for (model::LinearWeight* w : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.attn.index_q, &l.attn.index_k,
                                 &l.mlp.gate, &l.mlp.up, &l.mlp.down, &l.moe_weights.router,
                                 &l.moe_weights.shared.gate, &l.moe_weights.shared.up, &l.moe_weights.shared.down}) {
    release_pages(w->w);
  }
  for (model::Nvfp4Experts* s : {&l.moe_weights.gate, &l.moe_weights.up, &l.moe_weights.down}) {
    release_pages(s->values);
    release_pages(s->scales);
  }
}

// Bytes one layer takes on the GPU, as ResidentWeights holds it (projections BF16, experts
// NVFP4 codes and scales), and one token's K/V and index cache across the layer.
int64_t layer_bytes(const model::ModelConfig& c, int64_t l) {
  const int64_t h = c.hidden_size, d = c.head_dim, di = c.index_head_dim;
  int64_t params = h * d * (2 * c.num_heads + 2 * c.num_kv_heads);
  if (c.sparse_layer[l]) params += h * di * (c.num_index_heads + 1);
  if (!c.moe_layer[l]) return 2 * (params + 3 * h * c.dense_intermediate_size);
  params += c.num_experts * h + 3 * h * c.shared_intermediate_size;
  const int64_t experts = c.num_experts * 3 * h * c.moe_intermediate_size;
  return 2 * params + experts / 2 + experts / 16;
}

struct CapacityOptions {
  int64_t layers = 0;  // 0: as many as fit beside one sequence
  int64_t max_model_len = 262144;
  std::string kv_cache_dtype = "nvfp4", index_cache_dtype = "nvfp4";
  double seconds = 480;  // stop stepping after this long
  std::string device = "cuda";
};

// Progress lines go out at once: the run takes minutes and may be cut short.
template <typename... Args>
void report(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(format, std::forward<Args>(args)...);
  std::fflush(stdout);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run_capacity(const CapacityOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  engine::LoadedModel m;
  m.backend = engine::make_backend(o.device);
  const model::CacheFormats formats = engine::cache_formats(o.kv_cache_dtype, o.index_cache_dtype);
  const engine::ServingPoolFlags flags{.max_model_len = o.max_model_len};
  const engine::MemoryInfo memory = engine::backend_memory(*m.backend);

  // The layer count: the largest whose weights and one sequence's caches fit the pool's share.
  int64_t layers = o.layers;
  if (layers == 0) {
    const model::ModelConfig full = model::parse_model_config(config_with_layers(60).dump(), kPreset);
    const int64_t per_token_layer = model::KvMemory::page_bytes(full, formats) / kvcache::kPageTokens / full.num_layers;
    const int64_t budget = static_cast<int64_t>(flags.memory_utilization * memory.total_bytes) -
                           (memory.total_bytes - memory.available_bytes) - 2 * 2 * full.vocab_size * full.hidden_size -
                           2 * model::estimate_activations(full, {.max_num_batched_tokens = flags.max_num_batched_tokens,
                                                                  .max_num_seqs = flags.max_num_seqs,
                                                                  .max_model_len = o.max_model_len}).peak -
                           m.backend->op_scratch_bytes();
    int64_t used = 0;
    for (int64_t l = 0; l < full.num_layers; ++l) {
      used += layer_bytes(full, l) + per_token_layer * o.max_model_len;
      if (used > budget) break;
      layers = l + 1;
    }
    FP4_CHECK(layers > 0, "not one layer fits beside a {}-token sequence", o.max_model_len);
  }
  const json config_json = config_with_layers(layers);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("fp4serve-capacity-{}", getpid());
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::filesystem::path path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{dir};
  std::ofstream(dir / "config.json") << config_json.dump(2);
  m.config = model::load_model_config((dir / "config.json").string());
  const model::ModelConfig& c = m.config;
  report("capacity: {} layers of {} ({} dense), hidden {}, {} experts, vocabulary {}; {} KV / {} index cache\n",
             c.num_layers, kPreset, c.num_layers - c.count_moe_layers(), c.hidden_size, c.num_experts, c.vocab_size,
             o.kv_cache_dtype, o.index_cache_dtype);

  RandomWeights random(0xCA9AC17);
  m.weights.embed = random.bf16_linear(c.vocab_size, c.hidden_size);
  m.weights.lm_head = random.bf16_linear(c.vocab_size, c.hidden_size);
  m.weights.final_norm = random.norm(c.hidden_size);
  m.resident = std::make_unique<model::ResidentWeights>(m.weights, *m.backend);
  // On the CPU (a trial run) the host tensors are the only copy: they stay.
  const bool release = !m.backend->uses_host_memory();
  if (release) {
    release_pages(m.weights.embed.w);
    release_pages(m.weights.lm_head.w);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    m.weights.layers.push_back(random_layer(c, l, random));
    m.resident->place_new(m.weights, *m.backend);
    if (release) release_layer(m.weights.layers.back());
  }
  report("capacity: weights {:.2f} GB on the GPU, made and placed in {:.0f} s\n", m.resident->device_bytes() / 1e9,
             seconds_since(start));

  const engine::KvPoolPlan pool = engine::plan_serving_pool(m, formats, flags);
  report("capacity: engine pool\n{}\n", pool.describe(o.max_model_len));

  plan::Options po;
  po.model = (dir / "config.json").string();
  // The bytes as held, split among the classes with the routed experts in NVFP4. On the CPU (a
  // trial run) the weights are the host's tensors: the planner counts them itself.
  po.quantization = "nvfp4-experts";
  if (m.resident->device_bytes() > 0) po.weights_bytes = std::to_string(m.resident->device_bytes());
  po.kv_cache_dtype = o.kv_cache_dtype;
  po.index_cache_dtype = o.index_cache_dtype;
  po.gpu_memory_gb = static_cast<double>(memory.total_bytes) / 1e9;
  po.max_model_len = std::to_string(o.max_model_len);
  po.max_num_batched_tokens = flags.max_num_batched_tokens;
  po.max_num_seqs = flags.max_num_seqs;
  const plan::Result predicted = plan::compute_plan(po);
  report("capacity: plan: usable {:.2f} GB - weights {:.2f} GB - reserve {:.2f} GB = KV budget {:.2f} GB, "
             "{:.2f}x -> {} sequences\n",
             predicted.usable_bytes / 1e9, predicted.weights_per_gpu / 1e9, predicted.reserve / 1e9,
             predicted.kv_budget / 1e9, predicted.pool.concurrency, predicted.max_concurrency_total);

  // Requests: as many as the pool could hold plus one. Each decodes long enough that the first
  // is still running when every later one that fits has prefilled (a prompt takes about one
  // step per chunk of the step's budget).
  const int64_t fit = pool.num_pages / pool.pages_per_seq;
  const int64_t chunks_per_prompt = (o.max_model_len + flags.max_num_batched_tokens - 1) / flags.max_num_batched_tokens;
  const int64_t output_tokens = (fit + 1) * (chunks_per_prompt + 2);
  FP4_CHECK(fit < flags.max_num_seqs, "the pool holds {} sequences of {} tokens, at or above max_num_seqs {}: the "
            "engine would stop at that count; give more layers or a longer --max-model-len", fit, o.max_model_len,
            flags.max_num_seqs);
  FP4_CHECK(2 * output_tokens <= o.max_model_len, "{} sequences of {} tokens would need {} output tokens each to "
            "run at once; give more layers or a longer --max-model-len", fit, o.max_model_len, output_tokens);
  engine::EngineConfig ec{.cache = formats, .num_pages = pool.num_pages, .max_model_len = o.max_model_len,
                          .scheduler = {.max_num_seqs = flags.max_num_seqs,
                                        .max_num_batched_tokens = flags.max_num_batched_tokens}};
  engine::LlmEngine eng(m, ec);
  uint64_t token_seed = 0x70CE5;
  for (int64_t r = 0; r <= fit; ++r) {
    engine::EngineRequest req;
    req.max_tokens = output_tokens;
    req.prompt.resize(static_cast<size_t>(o.max_model_len - req.max_tokens));
    for (int32_t& t : req.prompt) {
      token_seed = token_seed * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int32_t>((token_seed >> 33) % static_cast<uint64_t>(c.vocab_size));
    }
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    eng.add_request(r, std::move(req));
  }
  const auto run_start = std::chrono::steady_clock::now();
  int64_t most_running = 0, steps = 0;
  bool first_done = false;
  double last_report = 0;
  while (eng.has_work() && !first_done && seconds_since(run_start) < o.seconds) {
    for (const engine::RequestOutput& out : eng.step()) first_done |= out.id == 0 && out.finished();
    ++steps;
    most_running = std::max(most_running, eng.metrics().num_running);
    if (seconds_since(run_start) - last_report > 15) {
      last_report = seconds_since(run_start);
      report("capacity: {:.0f} s, step {}, {} running, {} waiting, {} of {} pages in use\n", last_report, steps,
                 eng.metrics().num_running, eng.metrics().num_waiting, eng.metrics().kv_pages_used, pool.num_pages);
    }
  }
  const double run_seconds = seconds_since(run_start);
  report("capacity: {} steps in {:.0f} s ({}); at most {} of {} requests ran at once; the pool holds {}, "
             "the plan predicts {}\n",
             steps, run_seconds, first_done ? "the first request finished" : "stopped at the time limit",
             most_running, fit + 1, fit, predicted.max_concurrency_total);
  const bool agree = std::abs(most_running - predicted.max_concurrency_total) <= 1;
  report("capacity: engine {} vs plan {}: {}\n", most_running, predicted.max_concurrency_total,
             agree ? "within one sequence" : "DISAGREE");
  return agree && first_done ? 0 : 1;
}

}  // namespace

CLI::App* add_bench_capacity_command(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<CapacityOptions>();
  CLI::App* sub = bench.add_subcommand(
      "capacity", "Run as many max-length sequences at once as the engine's pool holds on this GPU, with a "
                  "MiniMax-M3.1-Flash-width model of random weights, and compare with `fp4serve plan`");
  sub->add_option("--layers", o->layers, "Layers of the model (0: as many as fit beside one sequence)")
      ->capture_default_str()->check(CLI::Range(0, 60));
  sub->add_option("--max-model-len", o->max_model_len, "Tokens of each sequence")->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 20));
  sub->add_option("--kv-cache-dtype", o->kv_cache_dtype, "bf16, fp8 or nvfp4")->capture_default_str();
  sub->add_option("--index-cache-dtype", o->index_cache_dtype, "bf16, fp8 or nvfp4")->capture_default_str();
  sub->add_option("--seconds", o->seconds, "Stop stepping after this long")->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  sub->add_option("--device", o->device, "cuda, or cpu (to try the run on a small shape)")->capture_default_str();
  sub->callback([o, &exit_code] { exit_code = run_capacity(*o); });
  return sub;
}

}  // namespace fp4::cli
