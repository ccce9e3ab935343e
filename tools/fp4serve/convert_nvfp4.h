// `fp4serve convert --in DIR --out DIR --experts nvfp4`: a Hugging Face checkpoint (BF16 or
// MXFP8) with its routed experts re-quantized to ModelOpt NVFP4 and every other tensor copied
// byte for byte (or the attention projections converted on request), streamed tensor by
// tensor into sharded safetensors. Layout, atomicity and the report: docs/convert.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::convert {

// What happens to the attention and index projections (q, k, v, o, index_q, index_k).
enum class AttentionMode { kKeep, kMxfp8, kBf16 };
AttentionMode parse_attention_mode(std::string_view text);  // "keep", "mxfp8", "bf16"

struct Nvfp4ConvertOptions {
  std::string in, out;
  AttentionMode attention = AttentionMode::kKeep;
  int threads = 0;                              // 0: all cores
  int64_t max_shard_bytes = 5'000'000'000;      // tensor data per shard, at most
  bool force = false;                           // write into a non-empty --out
  bool progress = true;                         // the bar on stderr (drawn on a terminal only)
};

// The report's tensor classes: routed experts, attention (with the index branch), the rest.
enum class ConvertClass { kRoutedExperts, kAttention, kOther };
std::string_view convert_class_name(ConvertClass cls);

struct ConvertedTensor {
  std::string name;    // the weight, e.g. "...experts.3.w1.weight"
  std::string from;    // its source format ("bf16", "mxfp8", ...)
  std::string to;      // "nvfp4", "mxfp8" or "bf16"
  double rel_rms = 0;  // ||w_converted - w|| / ||w||, against the source's exact values
};

struct Nvfp4ConvertReport {
  std::string in, out;
  int64_t bytes_before[3] = {0, 0, 0};  // indexed by ConvertClass, weights and their scales
  int64_t bytes_after[3] = {0, 0, 0};
  std::vector<ConvertedTensor> converted;  // in name order
  int64_t tensors_copied = 0;
  int shards = 0;
  double seconds = 0;

  int64_t total_before() const { return bytes_before[0] + bytes_before[1] + bytes_before[2]; }
  int64_t total_after() const { return bytes_after[0] + bytes_after[1] + bytes_after[2]; }
};

// Converts; every input is read and checked before --out is touched, and a failure removes
// what this run wrote. Throws fp4::Error naming the file or tensor at fault.
Nvfp4ConvertReport convert_experts_to_nvfp4(const Nvfp4ConvertOptions& options);

// The report as text (per class before/after, total, saving, the 5 worst tensors) and as JSON.
std::string format_convert_report(const Nvfp4ConvertReport& report);
nlohmann::ordered_json convert_report_json(const Nvfp4ConvertReport& report);

// --dry-run: the weight bytes of a preset (or of DIR's config.json) in its published scheme
// and with NVFP4 routed experts, from model::count_weights, the planner's size model.
std::string format_nvfp4_dry_run(const std::string& model_or_dir);

}  // namespace fp4::convert
