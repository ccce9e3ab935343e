// Built-in models: the config.json files under presets/, embedded at build time, with the
// checkpoint each one is published as (presets/<name>/checkpoint.json) and its format.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace fp4::model {

// A published checkpoint's size as its publisher states it. The planner compares it with the
// size it computes from config.json, so it is kept exactly as published and never adjusted.
struct PublishedCheckpoint {
  std::string repository;   // e.g. "MiniMaxAI/MiniMax-M3-MXFP8"
  int64_t total_bytes = 0;
  std::string total_as_published;  // the figure as written, e.g. "451.5 GB"
  int64_t shards = 0;       // safetensors files, 0 when not published
};

struct ModelPreset {
  std::string_view name;          // what --model accepts
  std::string_view display_name;  // e.g. "MiniMax-M3"
  PublishedCheckpoint checkpoint; // the published checkpoint the default scheme describes
  QuantScheme scheme;             // that checkpoint's quantization
  std::string_view config_json;
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_model_preset(std::string_view name);  // nullptr when unknown
std::string model_preset_names();                              // "a, b" for messages

// Parses a checkpoint.json; `source` names it in error messages.
PublishedCheckpoint parse_published_checkpoint(const std::string& json_text,
                                               const std::string& source);

namespace detail {
struct EmbeddedConfig {
  const char* name;
  const char* config_json;
  const char* checkpoint_json;
};
extern const EmbeddedConfig kEmbeddedConfigs[];
extern const int kNumEmbeddedConfigs;
}  // namespace detail

}  // namespace fp4::model
