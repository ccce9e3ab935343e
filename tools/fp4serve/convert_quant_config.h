// The quantization metadata of a converted checkpoint, in the two places ModelOpt writes it and
// vLLM / TensorRT-LLM read it: config.json's `quantization_config` and `hf_quant_config.json`.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace fp4::convert {

struct QuantConfig {
  nlohmann::ordered_json config_block;     // config.json's "quantization_config"
  nlohmann::ordered_json hf_quant_config;  // hf_quant_config.json
};

// `module_formats`: every Linear module of the output (its weight's name without ".weight")
// and its stored format ("nvfp4", "mxfp8", "fp8", "bf16", ...). One quantized format gives that
// quant_algo; several give "MIXED_PRECISION" with each quantized module listed. Unquantized
// modules go to exclude_modules.
QuantConfig make_quant_config(const std::map<std::string, std::string>& module_formats);

}  // namespace fp4::convert
