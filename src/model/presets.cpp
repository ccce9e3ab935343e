#include "model/presets.h"

#include <string_view>

#include "core/check.h"

namespace fp4::model {
namespace {

struct PresetFacts {
  std::string_view name, display_name, checkpoint;
  QuantScheme scheme;
};

// The M3.1-Flash launch report compares these two published checkpoints: M3 with MXFP8
// weights and M3.1-Flash with NVFP4 routed experts.
constexpr PresetFacts kFacts[] = {
    {"minimax-m3", "MiniMax-M3", "MiniMaxAI/MiniMax-M3-MXFP8", QuantScheme::kMXFP8},
    {"minimax-m3.1-flash", "MiniMax-M3.1-Flash", "MiniMaxAI/MiniMax-M3.1-Flash",
     QuantScheme::kNVFP4Experts},
};

std::vector<ModelPreset> build() {
  std::vector<ModelPreset> presets;
  for (const auto& facts : kFacts) {
    const char* json = nullptr;
    for (int i = 0; i < detail::kNumEmbeddedConfigs; ++i) {
      if (facts.name == detail::kEmbeddedConfigs[i].name) json = detail::kEmbeddedConfigs[i].json;
    }
    FP4_CHECK(json != nullptr, "preset {} has no embedded presets/{}/config.json", facts.name,
              facts.name);
    presets.push_back({facts.name, facts.display_name, facts.checkpoint, facts.scheme, json});
  }
  return presets;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = build();
  return presets;
}

const ModelPreset* find_model_preset(std::string_view name) {
  for (const auto& p : model_presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string model_preset_names() {
  std::string names;
  for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

}  // namespace fp4::model
