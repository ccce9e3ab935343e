#include "tools/fp4serve/init_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <span>

#include "core/check.h"
#include "formats/minifloat.h"
#include "model/safetensors_writer.h"
#include "tools/fp4serve/convert_quant_config.h"
#include "tools/fp4serve/convert_weight.h"

namespace fp4::init_model {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit state advanced by a constant and mixed.
// It is written out here, not taken from <random>, so that the same seed gives the same bytes
// with every compiler and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Irwin-Hall: the sum of 12 uniforms on [0, 1) less 6 has mean 0 and variance 12 / 12 = 1.
  // The uniforms are 32-bit integers summed exactly, so the one rounding is the final scaling
  // (no libm call whose last bit could differ between platforms). The tails stop at +-6, which
  // suits an initialization.
  double normal() {
    uint64_t sum = 0;
    for (int i = 0; i < 6; ++i) {
      const uint64_t r = next();
      sum += (r >> 32) + (r & 0xFFFFFFFFull);
    }
    return static_cast<double>(sum) * 0x1p-32 - 6.0;
  }

 private:
  uint64_t state_;
};

// FNV-1a of the tensor name: each tensor draws from its own stream, so its values depend on
// the seed and its name only, not on which other tensors the preset has.
uint64_t name_hash(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

std::vector<float> initial_values(const TensorSpec& t, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n), 0.0f);
  if (t.init != Init::kNormal) return v;
  SplitMix64 rng(SplitMix64(seed).next() ^ name_hash(t.name));
  for (float& x : v) x = static_cast<float>(t.std * rng.normal());
  return v;
}

template <typename T>
std::vector<uint8_t> raw_bytes(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return {p, p + v.size() * sizeof(T)};
}

std::string module_of(const std::string& weight) {
  return weight.substr(0, weight.size() - std::string_view(".weight").size());
}

// One weight as the tensors that store it, under ModelOpt's names for NVFP4.
struct StoredTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void store(const TensorSpec& t, const std::vector<float>& values, std::vector<StoredTensor>& out) {
  switch (t.storage) {
    case Storage::kF32:
      out.push_back({t.name, "F32", t.shape, raw_bytes(values)});
      return;
    case Storage::kBf16: {
      std::vector<uint16_t> bits(values.size());
      std::transform(values.begin(), values.end(), bits.begin(), bf16_encode);
      out.push_back({t.name, "BF16", t.shape, raw_bytes(bits)});
      return;
    }
    case Storage::kNvfp4: {
      const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
      const convert::QuantizedWeight q =
          convert::quantize_weight(values, cols, convert::WeightTarget::kNvfp4, t.name);
      const std::string m = module_of(t.name);
      // No activation calibration for random weights: the identity, as convert writes.
      const float input_scale = 1.0f;
      out.push_back({t.name, "U8", {rows, cols / 2}, q.values});
      out.push_back({m + ".weight_scale", "F8_E4M3", {rows, cols / 16}, q.scales});
      out.push_back({m + ".weight_scale_2", "F32", {}, raw_bytes(std::vector<float>{q.global_scale})});
      out.push_back({m + ".input_scale", "F32", {}, raw_bytes(std::vector<float>{input_scale})});
      return;
    }
  }
}

// The quantization metadata from every Linear's stored format, as convert derives it.
convert::QuantConfig quantization_config(const std::vector<TensorSpec>& specs) {
  std::map<std::string, std::string> formats;
  for (const TensorSpec& t : specs) {
    if (t.shape.size() != 2 || t.name.find("embed_tokens") != std::string::npos) continue;
    formats[module_of(t.name)] = t.storage == Storage::kNvfp4 ? "nvfp4"
                                 : t.storage == Storage::kBf16 ? "bf16" : "f32";
  }
  return convert::make_quant_config(formats);
}

void write_json(const fs::path& path, const ordered_json& json) {
  model::write_text_file_atomically(path.string(), json.dump(2) + "\n");
}

// The directory: new, empty, or (with --force) one whose files of our names are replaced.
void prepare_output_dir(const std::string& dir, bool force) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    FP4_CHECK(!ec, "cannot create --out {}: {}", dir, ec.message());
    return;
  }
  FP4_CHECK(fs::is_directory(dir, ec), "--out {} exists and is not a directory", dir);
  const bool empty = fs::is_empty(dir, ec);
  FP4_CHECK(!ec, "cannot list --out {}: {}", dir, ec.message());
  FP4_CHECK(empty || force, "--out {} exists and is not empty; expected a new or empty directory "
            "(--force writes over files of the same names)", dir);
  // Gone first: while the other files are replaced, the directory must not load as a model.
  fs::remove(fs::path(dir) / "config.json", ec);
  FP4_CHECK(!ec, "cannot remove {}/config.json: {}", dir, ec.message());
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny-m3.1-flash"}; }

const RandomModelPreset& find_preset(std::string_view name) {
  // MiniMax-M3.1-Flash shrunk: 4 KV heads, hence 4 index heads each selecting its own blocks,
  // as in the full model (but 4 query heads per KV head, not 16: 64 query heads measured 2-3x
  // slower to decode on the CPU), RoPE on half of each head, a dense first layer then MoE
  // layers with top-4 routing and one shared expert of the routed experts' width, MSA in every
  // layer. Sized for a fast CPU decode (about 1 ms of one core per token at short contexts) in
  // well under 8 MiB.
  static const RandomModelPreset kTiny{.name = "tiny-m3.1-flash",
                                       .hidden_size = 128,
                                       .num_layers = 4,
                                       .num_heads = 16,
                                       .num_kv_heads = 4,
                                       .head_dim = 32,
                                       .rotary_dim = 16,
                                       .index_head_dim = 32,
                                       .dense_layers = 1,
                                       .dense_intermediate_size = 256,
                                       .num_experts = 32,
                                       .num_experts_per_tok = 4,
                                       .expert_intermediate_size = 64,
                                       .shared_intermediate_size = 64,
                                       .max_position_embeddings = 32768};
  if (name == kTiny.name) return kTiny;
  fail("--preset {}: unknown; expected one of: {}", name, fmt::join(preset_names(), ", "));
}

std::vector<TensorSpec> tensor_specs(const RandomModelPreset& p) {
  // A real model's initializer_range. Norm weights start at their identity: 0 under the Gemma
  // convention the family uses (the norm multiplies by 1 + w). The selection bias is small
  // beside the sigmoid scores (about 0.5 +- 0.06 here), so it nudges routing without fixing it.
  constexpr double kStd = 0.02, kBiasStd = 0.01;
  const std::string lm = "language_model.";
  std::vector<TensorSpec> s;
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols, Storage storage) {
    s.push_back({lm + name + ".weight", {rows, cols}, storage, Init::kNormal, kStd});
  };
  auto norm = [&](const std::string& name, int64_t n) {
    s.push_back({lm + name + ".weight", {n}, Storage::kBf16, Init::kZeros, 0});
  };
  auto mlp = [&](const std::string& base, const char* const names[3], int64_t inter, Storage st) {
    linear(base + names[0], inter, p.hidden_size, st);
    linear(base + names[1], inter, p.hidden_size, st);
    linear(base + names[2], p.hidden_size, inter, st);
  };
  static const char* const kMlp[3] = {"gate_proj", "up_proj", "down_proj"};
  static const char* const kExpert[3] = {"w1", "w3", "w2"};
  const int64_t h = p.hidden_size, d = p.head_dim, di = p.index_head_dim;
  linear("model.embed_tokens", token_ids().vocab_size, h, Storage::kBf16);
  for (int64_t i = 0; i < p.num_layers; ++i) {
    const std::string l = fmt::format("model.layers.{}.", i);
    norm(l + "input_layernorm", h);
    norm(l + "post_attention_layernorm", h);
    const std::string a = l + "self_attn.";
    linear(a + "q_proj", p.num_heads * d, h, Storage::kBf16);
    linear(a + "k_proj", p.num_kv_heads * d, h, Storage::kBf16);
    linear(a + "v_proj", p.num_kv_heads * d, h, Storage::kBf16);
    linear(a + "o_proj", h, p.num_heads * d, Storage::kBf16);
    norm(a + "q_norm", d);
    norm(a + "k_norm", d);
    linear(a + "index_q_proj", p.num_kv_heads * di, h, Storage::kBf16);
    linear(a + "index_k_proj", di, h, Storage::kBf16);
    norm(a + "index_q_norm", di);
    norm(a + "index_k_norm", di);
    if (i < p.dense_layers) {
      mlp(l + "mlp.", kMlp, p.dense_intermediate_size, Storage::kBf16);
      continue;
    }
    const std::string m = l + "block_sparse_moe.";
    linear(m + "gate", p.num_experts, h, Storage::kF32);
    s.push_back({lm + m + "e_score_correction_bias", {p.num_experts}, Storage::kF32, Init::kNormal,
                 kBiasStd});
    for (int64_t e = 0; e < p.num_experts; ++e) {
      mlp(fmt::format("{}experts.{}.", m, e), kExpert, p.expert_intermediate_size, Storage::kNvfp4);
    }
    mlp(m + "shared_experts.", kMlp, p.shared_intermediate_size, Storage::kBf16);
  }
  norm("model.norm", h);
  linear("lm_head", token_ids().vocab_size, h, Storage::kBf16);
  std::sort(s.begin(), s.end(), [](const TensorSpec& x, const TensorSpec& y) { return x.name < y.name; });
  return s;
}

InitModelReport write_random_model(const InitModelOptions& o) {
  FP4_CHECK(!o.out.empty(), "init-model needs --out DIR");
  const RandomModelPreset& preset = find_preset(o.preset);
  const std::vector<TensorSpec> specs = tensor_specs(preset);

  // Everything is made in memory first (a few MiB), so a bad preset or a quantizer error
  // leaves the directory untouched.
  std::vector<StoredTensor> stored;
  InitModelReport report;
  report.out = o.out;
  for (const TensorSpec& t : specs) {
    const std::vector<float> values = initial_values(t, o.seed);
    report.parameters += static_cast<int64_t>(values.size());
    store(t, values, stored);
  }
  std::vector<model::SafetensorsWriteTensor> tensors;
  for (const StoredTensor& t : stored) tensors.push_back({t.name, t.dtype, t.shape, t.bytes});
  report.tensors = static_cast<int64_t>(tensors.size());
  const convert::QuantConfig quant = quantization_config(specs);
  const ordered_json config = config_json(preset, o.seed, quant.config_block);

  prepare_output_dir(o.out, o.force);
  const fs::path dir(o.out);
  const std::string weights = (dir / "model.safetensors").string();
  model::write_safetensors(weights, tensors, {{"format", "pt"}});
  report.safetensors_bytes = static_cast<int64_t>(fs::file_size(weights));
  write_json(dir / "tokenizer.json", tokenizer_json());
  write_json(dir / "tokenizer_config.json", tokenizer_config_json(preset));
  write_json(dir / "generation_config.json", generation_config_json());
  write_json(dir / "hf_quant_config.json", quant.hf_quant_config);
  model::write_text_file_atomically(
      (dir / "README.md").string(),
      readme_text(preset, o.seed, report.parameters, report.safetensors_bytes));
  // Last: loaders start from config.json.
  write_json(dir / "config.json", config);
  return report;
}

}  // namespace fp4::init_model
