// Built-in models: the config.json files under presets/, embedded at build time, with the
// checkpoint format each one is published in.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace fp4::model {

struct ModelPreset {
  std::string_view name;          // what --model accepts
  std::string_view display_name;  // e.g. "MiniMax-M3"
  std::string_view checkpoint;    // the published checkpoint the default scheme describes
  QuantScheme scheme;             // that checkpoint's quantization
  std::string_view config_json;
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_model_preset(std::string_view name);  // nullptr when unknown
std::string model_preset_names();                              // "a, b" for messages

namespace detail {
struct EmbeddedConfig {
  const char* name;
  const char* json;
};
extern const EmbeddedConfig kEmbeddedConfigs[];
extern const int kNumEmbeddedConfigs;
}  // namespace detail

}  // namespace fp4::model
