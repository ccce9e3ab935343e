// The model's decode step on the GPU, through ModelRunner as the engine runs it (CUDA graphs
// included). The model: the minimax-m3.1-flash preset's config with every layer an MSA + MoE
// layer (as its layers 3-59 are) and a 32,768-token vocabulary (the vocabulary does not change a
// layer's time); random weights in the checkpoint's formats: attention and the index branch
// MXFP8, held as the engine holds them by default at each batch (MXFP8 up to 16 sequences, BF16
// past that; at 64K the other way too, side by side), the shared expert, the embedding and the
// LM head BF16, the router in FP32, routed experts in NVFP4. The caches are
// filled with one valid byte pattern, since the kernels' time does not depend on the values,
// and a batch's sequences map onto at most kDistinctPages distinct pages (several GB, far
// beyond the L2 cache). Per-layer time is (step of 3 layers - step of 1 layer) / 2, which
// cancels the embedding, the LM head, the logits' copy to the host and the launch.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/profiling_backend.h"
#include "core/check.h"
#include "engine/loaded_model.h"
#include "formats/mxfp8.h"
#include "model/forward.h"
#include "model/presets.h"
#include "tools/fp4serve/bench_model.h"

namespace fp4::bench {
namespace {

constexpr int64_t kVocab = 32768;
constexpr int64_t kDistinctPages = 8192;

model::ModelConfig m31_flash_layers(int64_t layers) {
  const model::ModelPreset* preset = model::find_model_preset("minimax-m3.1-flash");
  FP4_CHECK(preset != nullptr, "the minimax-m3.1-flash preset is missing");
  model::ModelConfig c = model::parse_model_config(std::string(preset->config_json), "minimax-m3.1-flash");
  c.num_layers = layers;
  c.moe_layer.assign(static_cast<size_t>(layers), true);
  c.sparse_layer.assign(static_cast<size_t>(layers), true);
  c.vocab_size = kVocab;
  return c;
}

// Random weights from a 64-bit LCG: gigabytes of them, where std::normal_distribution would
// take minutes; the timing does not depend on the values, only on their being finite.
class Filler {
 public:
  explicit Filler(uint64_t seed) : x_(seed) {}
  std::vector<float> floats(int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = scale * (static_cast<float>(next() >> 40) * 0x1p-23f - 1.0f);  // [-1, 1)
    return v;
  }
  model::LinearWeight linear(int64_t out, int64_t in) {
    return {.w = floats(out * in, 1.0f / std::sqrt(float(in))), .out = out, .in = in, .format = "f32"};
  }
  // Values cut to BF16 (truncation keeps them finite and is as random).
  model::LinearWeight linear_bf16(int64_t out, int64_t in) {
    model::LinearWeight w = linear(out, in);
    for (float& v : w.w) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xFFFF0000u);
    w.format = "bf16";
    return w;
  }
  // MXFP8 blocks: E4M3 codes from a cheap generator (no NaN), scales of 2^-16 to 2^-13 (values
  // up to about 0.05, as 1 / sqrt(6144) makes them), decoded to the FP32s the checkpoint reader
  // would hand over.
  model::LinearWeight linear_mxfp8(int64_t out, int64_t in) {
    model::LinearWeight w{.w = std::vector<float>(static_cast<size_t>(out * in)), .out = out, .in = in,
                          .format = "mxfp8"};
    uint8_t codes[kMxfp8BlockElems];
    for (size_t b = 0; b < w.w.size(); b += kMxfp8BlockElems) {
      for (int i = 0; i < kMxfp8BlockElems; i += 8) {
        const uint64_t word = next() & 0xF7F7F7F7F7F7F7F7ull;  // exponent below 15: never 0x7F
        std::memcpy(codes + i, &word, 8);
      }
      mxfp8_dequantize_block(codes, static_cast<uint8_t>(111 + (next() >> 62)), &w.w[b]);
    }
    return w;
  }
  // NVFP4 stacks: codes from a cheap generator, E4M3 scales in [2^-6, 2^2) so no value is NaN.
  model::Nvfp4Experts experts(int64_t count, int64_t n, int64_t k) {
    model::Nvfp4Experts s;
    s.n = n;
    s.k = k;
    s.values.resize(static_cast<size_t>(count * n * k / 2));
    s.scales.resize(static_cast<size_t>(count * n * k / 16));
    for (size_t i = 0; i + 8 <= s.values.size(); i += 8) {
      const uint64_t word = next();
      std::memcpy(&s.values[i], &word, 8);
    }
    for (uint8_t& b : s.scales) b = static_cast<uint8_t>(0x18 + (next() >> 60) * 2);
    s.global_scales.assign(static_cast<size_t>(count), 1.0f / 64);
    return s;
  }

 private:
  uint64_t next() { return x_ = x_ * 6364136223846793005ull + 1442695040888963407ull; }
  uint64_t x_;
};

model::ModelWeights random_weights(const model::ModelConfig& c, Filler& f) {
  const int64_t h = c.hidden_size, d = c.head_dim, di = c.index_head_dim;
  model::ModelWeights w;
  w.embed = f.linear_bf16(c.vocab_size, h);
  w.lm_head = f.linear_bf16(c.vocab_size, h);
  w.final_norm = f.floats(h, 0.1f);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    model::LayerWeights layer;
    layer.sparse = layer.moe = true;
    layer.input_norm = f.floats(h, 0.1f);
    layer.post_attention_norm = f.floats(h, 0.1f);
    model::AttentionWeights& a = layer.attn;
    a.q = f.linear_mxfp8(c.num_heads * d, h);
    a.k = f.linear_mxfp8(c.num_kv_heads * d, h);
    a.v = f.linear_mxfp8(c.num_kv_heads * d, h);
    a.o = f.linear_mxfp8(h, c.num_heads * d);
    a.q_norm = f.floats(d, 0.1f);
    a.k_norm = f.floats(d, 0.1f);
    a.index_q = f.linear_mxfp8(c.num_index_heads * di, h);
    a.index_k = f.linear_mxfp8(di, h);
    a.index_q_norm = f.floats(di, 0.1f);
    a.index_k_norm = f.floats(di, 0.1f);
    model::MoeWeights& m = layer.moe_weights;
    m.router = f.linear(c.num_experts, h);
    m.bias = f.floats(c.num_experts, 0.01f);
    m.nvfp4 = true;
    m.gate = f.experts(c.num_experts, c.moe_intermediate_size, h);
    m.up = f.experts(c.num_experts, c.moe_intermediate_size, h);
    m.down = f.experts(c.num_experts, h, c.moe_intermediate_size);
    m.has_shared = true;
    m.shared = {f.linear_bf16(c.shared_intermediate_size, h), f.linear_bf16(c.shared_intermediate_size, h),
                f.linear_bf16(h, c.shared_intermediate_size)};
    w.layers.push_back(std::move(layer));
  }
  return w;
}

// One model on the GPU with one cache per format.
struct Bench {
  model::ModelConfig config;
  model::ModelWeights weights;
  std::unique_ptr<model::ResidentWeights> resident;
  std::unique_ptr<model::ResidentWeights> resident_bf16;  // the MXFP8 projections held as BF16
};

// A decode step of `batch` sequences at `context` tokens: the caches, filled with one valid byte
// pattern on `stream`, and the batch.
struct DecodeStep {
  model::KvMemory cache;
  model::StepBatch batch;
  DecodeStep(const model::ModelConfig& config, Backend& backend, cudaStream_t stream, kvcache::PageDType dtype,
             int64_t sequences, int64_t context)
      : cache(config, {dtype, dtype}, kDistinctPages, backend) {
    for (int64_t l = 0; l < config.num_layers; ++l) {
      model::LayerCache& lc = cache.layer(l);
      // 0x38: E4M3 1.0 (NVFP4 scales and FP8 values), E2M1 code pairs of 4.0, BF16 4.4e-5.
      FP4_CUDA_CHECK(cudaMemsetAsync(lc.kv_pages.data(), 0x38, lc.kv_pages.size(), stream));
      FP4_CUDA_CHECK(cudaMemsetAsync(lc.index_pages.data(), 0x38, lc.index_pages.size(), stream));
      lc.kv_scales = {0.01f, 0.01f};
    }
    const int64_t blocks = (context + kvcache::kPageTokens - 1) / kvcache::kPageTokens;
    std::mt19937_64 rng(static_cast<uint64_t>(sequences * 7919 + context));
    for (int64_t i = 0; i < sequences; ++i) {
      batch.tokens.push_back(static_cast<int32_t>(rng() % kVocab));
      batch.positions.push_back(static_cast<int32_t>(context - 1));
      batch.seq_of_token.push_back(static_cast<int32_t>(i));
      batch.logit_rows.push_back(static_cast<int32_t>(i));
      // The last block, where the step writes its token, is the sequence's own page (slots of
      // one step must be distinct); the others cycle through the rest of the pool.
      for (int64_t j = 0; j + 1 < blocks; ++j) {
        batch.block_tables.push_back(static_cast<int32_t>((i * blocks + j) % (kDistinctPages - sequences)));
      }
      batch.block_tables.push_back(static_cast<int32_t>(kDistinctPages - 1 - i));
    }
    batch.num_seqs = sequences;
    batch.max_blocks = blocks;
  }
};

// Milliseconds per decode step: the first step records the graph (or, op by op, warms up),
// then the median of `reps`.
// pool: the recording takes its buffers from the stream-ordered pool (memory nodes between the
// kernels) instead of the recording arena, for the side-by-side rows.
double step_ms(const Bench& b, const model::ResidentWeights& resident, cuda::CudaBackend& gpu,
               kvcache::PageDType dtype, int64_t batch, int64_t context, int reps, bool graphs, bool pool = false) {
  gpu.set_recording_memory(pool ? cuda::CudaBackend::RecordingMemory::kStreamOrderedPool
                                : cuda::CudaBackend::RecordingMemory::kArena);
  DecodeStep step(b.config, gpu, gpu.stream(), dtype, batch, context);
  model::ModelRunner runner(b.config, b.weights, resident, gpu, step.cache);
  runner.set_graphs(graphs);
  runner.forward(step.batch);  // records, or warms up
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    runner.forward(step.batch);  // the KV slot of position context - 1 is rewritten each time: same work
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return cuda::median_of(ms);
}

// Each op's calls and milliseconds per decode step, timed one by one (ProfilingBackend: an event
// before and after every op, steps op by op), over `steps` steps after one that warms up.
std::map<std::string, ProfilingBackend::OpTime> op_ms_per_step(const model::ModelConfig& config,
                                                               const model::ModelWeights& weights,
                                                               const model::ResidentWeights& resident,
                                                               ProfilingBackend& profile, cudaStream_t stream,
                                                               int64_t batch, int64_t context, int steps) {
  DecodeStep step(config, profile, stream, kvcache::PageDType::kNVFP4, batch, context);
  model::ModelRunner runner(config, weights, resident, profile, step.cache);
  runner.set_graphs(false);
  runner.forward(step.batch);
  profile.reset();
  for (int r = 0; r < steps; ++r) runner.forward(step.batch);
  std::map<std::string, ProfilingBackend::OpTime> per_step;
  for (ProfilingBackend::OpTime t : profile.totals()) {
    t.ms /= steps;
    per_step[t.op] = t;
  }
  return per_step;
}

// A layer's ops timed one by one on NVFP4 caches at 64K, per layer as (3 layers - 1 layer) / 2
// of each op's time per step (which cancels the embedding, the LM head and the step's copies):
// what a layer spends its time on. The weights are placed afresh behind the profiling backend.
std::vector<Row> profile_layer_ops(const std::string& device, const Bench& one, const Bench& three,
                                   const Options& options) {
  constexpr int64_t kContext = 65536;
  auto gpu = std::make_unique<cuda::CudaBackend>();
  const cudaStream_t stream = gpu->stream();
  ProfilingBackend profile(std::move(gpu));
  const int steps = std::max(3, options.reps / 2);
  std::vector<Row> rows;
  for (int64_t batch : batch_sweep("model")) {
    if (!options.runs_batch(batch)) continue;
    // Held as the engine holds them at this batch; placed after `profile`, released before it.
    const auto held = batch > engine::kMxfp8MaxDecodeBatch ? model::ResidentWeights::Mxfp8::kAsBf16
                                                           : model::ResidentWeights::Mxfp8::kHold;
    const model::ResidentWeights resident1(one.weights, profile, held), resident3(three.weights, profile, held);
    const auto t1 = op_ms_per_step(one.config, one.weights, resident1, profile, stream, batch, kContext, steps);
    const auto t3 = op_ms_per_step(three.config, three.weights, resident3, profile, stream, batch, kContext, steps);
    double total = 0;
    for (const auto& [op, t] : t3) {
      const auto it = t1.find(op);
      const double ms = (t.ms - (it != t1.end() ? it->second.ms : 0.0)) / 2;
      const double calls = double(t.calls - (it != t1.end() ? it->second.calls : 0)) / (2.0 * steps);
      if (calls <= 0) continue;  // the step's own ops, not a layer's
      total += ms;
      rows.push_back({device, fmt::format("m3.1-flash layer op {} nvfp4 (one by one)", op),
                      fmt::format("b{} x {}K, {:.0f} calls/layer", batch, kContext / 1024, calls), 0, ms, 0, false});
    }
    rows.push_back({device, "m3.1-flash layer ops nvfp4 (one by one), sum",
                    fmt::format("b{} x {}K", batch, kContext / 1024), 0, total, 0, false});
  }
  return rows;
}

// Bytes one layer must move for one decode step: its weights (attention in MXFP8, or BF16 when
// held so, the shared expert in BF16, the FP32 router, the routed experts expected to be
// active), the index cache of every visible block and the K/V of the selected ones.
double layer_bytes(const model::ModelConfig& c, kvcache::PageDType dtype, int64_t batch, int64_t context,
                   bool attention_bf16) {
  const int64_t h = c.hidden_size, d = c.head_dim, di = c.index_head_dim;
  const double attention_bytes = attention_bf16 ? 2.0 : 1.0 + 1.0 / kMxfp8BlockElems;
  const double attention =
      attention_bytes * h * (c.num_heads * d * 2 + c.num_kv_heads * d * 2 + c.num_index_heads * di + di);
  const double shared = 2.0 * 3 * h * c.shared_intermediate_size + 4.0 * h * c.num_experts;
  const double active = c.num_experts * (1 - std::pow(1 - double(c.num_experts_per_tok) / c.num_experts, double(batch)));
  const double experts = active * 3 * h * c.moe_intermediate_size * (0.5 + 1.0 / 16);
  const auto kv = kvcache::kv_page_layout(dtype, static_cast<int>(c.num_kv_heads), static_cast<int>(d));
  const auto index = kvcache::index_page_layout(dtype, static_cast<int>(di));
  const int64_t blocks = (context + kvcache::kPageTokens - 1) / kvcache::kPageTokens;
  const double cache = double(batch) * (double(blocks) * index.page_bytes +
                                        double(std::min(blocks, c.sparse_topk_blocks)) * kv.page_bytes);
  return attention + shared + experts + cache;
}

}  // namespace

std::vector<Row> bench_model_decode(const std::string& device, double copy_gbps, const Options& options) {
  const int reps = options.reps;
  cuda::CudaBackend gpu;
  Filler filler(0x4D33);
  Bench one{m31_flash_layers(1), {}, nullptr, nullptr}, three{m31_flash_layers(3), {}, nullptr, nullptr};
  one.weights = random_weights(one.config, filler);
  three.weights = random_weights(three.config, filler);
  for (Bench* b : {&one, &three}) {
    b->resident = std::make_unique<model::ResidentWeights>(b->weights, gpu);
    b->resident_bf16 = std::make_unique<model::ResidentWeights>(b->weights, gpu, model::ResidentWeights::Mxfp8::kAsBf16);
  }
  std::vector<Row> rows;
  const int timed = std::max(3, reps / 2);
  for (kvcache::PageDType dtype : {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8, kvcache::PageDType::kBF16}) {
    for (int64_t batch : batch_sweep("model")) {
      if (!options.runs_batch(batch)) continue;
      for (int64_t context : {8192, 65536, 262144}) {
        // Op by op (--enforce-eager) too on NVFP4 caches, the engine's default: what the
        // recorded steps save per layer.
        // The attention held as the engine holds it by default at this batch (--mxfp8-weights
        // auto: MXFP8 up to kMxfp8MaxDecodeBatch sequences, else BF16), and at 64K on NVFP4
        // caches held the other way too, side by side (the projections' time does not depend on
        // the context).
        const bool default_bf16 = batch > engine::kMxfp8MaxDecodeBatch;
        // And at 64K on NVFP4 caches, the recording's buffers from the stream-ordered pool, as
        // before the recording arena: what the graph's programmatic edges are worth.
        for (const bool graphs : {true, false}) {
          for (const bool other : {false, true}) {
            for (const bool pool : {false, true}) {
              if ((!graphs || other || pool) && dtype != kvcache::PageDType::kNVFP4) continue;
              if ((other || pool) && (!graphs || context != 65536)) continue;
              if (other && pool) continue;
              const bool bf16 = default_bf16 != other;
              const double t1 = step_ms(one, bf16 ? *one.resident_bf16 : *one.resident, gpu, dtype, batch, context,
                                        timed, graphs, pool);
              const double t3 = step_ms(three, bf16 ? *three.resident_bf16 : *three.resident, gpu, dtype, batch,
                                        context, timed, graphs, pool);
              const double layer = (t3 - t1) / 2;
              const cuda::GraphCensus& graph = gpu.last_recording();  // the 3-layer step's
              rows.push_back(
                  {device,
                   fmt::format("m3.1-flash decode layer {}{}{}{}", kvcache::page_dtype_name(dtype),
                               graphs ? "" : " (eager)",
                               !other ? "" : bf16 ? " (attention held bf16)" : " (attention held mxfp8)",
                               pool ? " (recorded with pool memory)" : ""),
                   fmt::format("b{} x {}K, {:.0f} tok/s/layer, step(3 layers) {:.2f} ms{}", batch, context / 1024,
                               batch / (layer * 1e-3), t3,
                               !graphs ? ""
                                       : fmt::format(", graph {} kernels, {} memory nodes, {} programmatic edges",
                                                     graph.kernels, graph.memory_nodes, graph.programmatic_edges)),
                   layer_bytes(three.config, dtype, batch, context, bf16), layer, copy_gbps, false});
            }
          }
        }
      }
    }
  }
  if (options.profile_ops) {
    // The recorded steps' weights go first: the profile places its own.
    for (Bench* b : {&one, &three}) {
      b->resident.reset();
      b->resident_bf16.reset();
    }
    const std::vector<Row> ops = profile_layer_ops(device, one, three, options);
    rows.insert(rows.end(), ops.begin(), ops.end());
  }
  return rows;
}

}  // namespace fp4::bench
