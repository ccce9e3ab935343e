#include "tools/fp4serve/convert_quant_config.h"

#include <set>
#include <vector>

namespace fp4::convert {

namespace {

struct Algo {
  const char* name;
  int group_size;
};

// Formats ModelOpt names; anything else (bf16, f32, ...) is unquantized.
const std::map<std::string, Algo>& algos() {
  static const std::map<std::string, Algo> table = {
      {"nvfp4", {"NVFP4", 16}}, {"mxfp8", {"MXFP8", 32}}, {"fp8", {"FP8", 0}}};
  return table;
}

}  // namespace

QuantConfig make_quant_config(const std::map<std::string, std::string>& module_formats) {
  using nlohmann::ordered_json;
  std::set<std::string> used;
  std::vector<std::string> excluded;
  ordered_json layers = ordered_json::object();
  for (const auto& [module, format] : module_formats) {
    const auto it = algos().find(format);
    if (it == algos().end()) {
      excluded.push_back(module);
      continue;
    }
    used.insert(format);
    ordered_json layer = {{"quant_algo", it->second.name}};
    if (it->second.group_size > 0) layer["group_size"] = it->second.group_size;
    layers[module] = layer;
  }
  ordered_json q;
  // The routed experts are always NVFP4 here, so group_size is NVFP4's block whatever else the
  // checkpoint holds; a mixed checkpoint also lists each quantized module with its own.
  q["quant_algo"] = used.size() == 1 && used.count("nvfp4") ? "NVFP4" : "MIXED_PRECISION";
  q["group_size"] = 16;
  q["kv_cache_quant_algo"] = nullptr;
  q["exclude_modules"] = excluded;
  if (q["quant_algo"] == "MIXED_PRECISION") q["quantized_layers"] = layers;
  QuantConfig out;
  out.config_block = ordered_json{{"quant_method", "modelopt"}};
  out.config_block.update(q);
  out.hf_quant_config = {{"producer", {{"name", "fp4serve"}, {"version", "0.1.0"}}}, {"quantization", q}};
  return out;
}

}  // namespace fp4::convert
