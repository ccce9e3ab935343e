#include "model/presets.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/check.h"
#include "model/json_object.h"

namespace fp4::model {
namespace {

struct PresetFacts {
  std::string_view name, display_name;
  QuantScheme scheme;
};

// The M3.1-Flash launch report compares these two published checkpoints: M3 with MXFP8
// weights and M3.1-Flash with NVFP4 routed experts. The scheme is our reading of each
// checkpoint's format, so it lives here rather than in the presets' published files.
constexpr PresetFacts kFacts[] = {
    {"minimax-m3", "MiniMax-M3", QuantScheme::kMXFP8},
    {"minimax-m3.1-flash", "MiniMax-M3.1-Flash", QuantScheme::kNVFP4Experts},
};

std::vector<ModelPreset> build() {
  std::vector<ModelPreset> presets;
  for (const auto& facts : kFacts) {
    const detail::EmbeddedConfig* embedded = nullptr;
    for (int i = 0; i < detail::kNumEmbeddedConfigs; ++i) {
      if (facts.name == detail::kEmbeddedConfigs[i].name) embedded = &detail::kEmbeddedConfigs[i];
    }
    FP4_CHECK(embedded != nullptr, "preset {} has no embedded presets/{}/", facts.name,
              facts.name);
    const std::string source = "presets/" + std::string(facts.name) + "/checkpoint.json";
    presets.push_back({facts.name, facts.display_name,
                       parse_published_checkpoint(embedded->checkpoint_json, source),
                       facts.scheme, embedded->config_json});
  }
  return presets;
}

}  // namespace

PublishedCheckpoint parse_published_checkpoint(const std::string& json_text,
                                               const std::string& source) {
  using nlohmann::json;
  const json root = parse_json_object(json_text, source);
  const auto text = [&](const char* key) {
    FP4_CHECK(root.contains(key) && root[key].is_string() && !root[key].get<std::string>().empty(),
              "{}: {} is {}, expected a non-empty string", source, key,
              root.contains(key) ? root[key].dump() : "missing");
    return root[key].get<std::string>();
  };
  const auto count = [&](const char* key, bool required) -> int64_t {
    if (!required && !root.contains(key)) return 0;
    FP4_CHECK(root.contains(key) && root[key].is_number_integer() && root[key].get<int64_t>() > 0,
              "{}: {} is {}, expected a positive integer", source, key,
              root.contains(key) ? root[key].dump() : "missing");
    return root[key].get<int64_t>();
  };
  PublishedCheckpoint c;
  c.repository = text("repository");
  c.total_bytes = count("total_bytes", true);
  c.total_as_published = text("total_as_published");
  c.shards = count("shards", false);
  return c;
}

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
