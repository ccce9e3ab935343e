// The conversion report (text and JSON) and --dry-run's sizes from the planner's size model.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "model/config.h"
#include "model/presets.h"
#include "model/weights.h"
#include "tools/fp4serve/convert_nvfp4.h"

namespace fp4::convert {
namespace {

constexpr int kWorstListed = 5;

// Decimal units, like the planner and the progress bar.
std::string gb(int64_t bytes) {
  if (bytes >= 1'000'000'000) return fmt::format("{:.3f} GB", bytes / 1e9);
  if (bytes >= 1'000'000) return fmt::format("{:.3f} MB", bytes / 1e6);
  return fmt::format("{} B", bytes);
}

double saved_pct(int64_t before, int64_t after) {
  return before > 0 ? 100.0 * (before - after) / before : 0.0;
}

std::vector<ConvertedTensor> worst(const Nvfp4ConvertReport& r) {
  std::vector<ConvertedTensor> w = r.converted;
  std::stable_sort(w.begin(), w.end(), [](const auto& a, const auto& b) { return a.rel_rms > b.rel_rms; });
  if (w.size() > kWorstListed) w.resize(kWorstListed);
  return w;
}

ConvertClass report_class(model::WeightClass cls) {
  if (cls == model::WeightClass::kRoutedExperts) return ConvertClass::kRoutedExperts;
  if (cls == model::WeightClass::kAttention || cls == model::WeightClass::kIndex) return ConvertClass::kAttention;
  return ConvertClass::kOther;
}

}  // namespace

std::string format_convert_report(const Nvfp4ConvertReport& r) {
  std::string s = fmt::format("fp4serve convert: {} -> {}: {} tensors converted, {} copied, {} "
                              "shard(s), {:.1f} s\n", r.in, r.out, r.converted.size(),
                              r.tensors_copied, r.shards, r.seconds);
  s += fmt::format("  {:<16} {:>14} {:>14} {:>8}\n", "class", "before", "after", "saved");
  for (int c = 0; c < 3; ++c) {
    s += fmt::format("  {:<16} {:>14} {:>14} {:>7.1f}%\n", convert_class_name(static_cast<ConvertClass>(c)),
                     gb(r.bytes_before[c]), gb(r.bytes_after[c]), saved_pct(r.bytes_before[c], r.bytes_after[c]));
  }
  s += fmt::format("  {:<16} {:>14} {:>14} {:>7.1f}%\n", "total", gb(r.total_before()),
                   gb(r.total_after()), saved_pct(r.total_before(), r.total_after()));
  double sum = 0;
  for (const ConvertedTensor& t : r.converted) sum += t.rel_rms;
  if (!r.converted.empty()) {
    s += fmt::format("  relative RMS error ||w_new - w|| / ||w||: mean {:.4f}; worst:\n",
                     sum / static_cast<double>(r.converted.size()));
    for (const ConvertedTensor& t : worst(r)) {
      s += fmt::format("    {:.4f}  {} ({} -> {})\n", t.rel_rms, t.name, t.from, t.to);
    }
  }
  return s;
}

nlohmann::ordered_json convert_report_json(const Nvfp4ConvertReport& r) {
  using nlohmann::ordered_json;
  ordered_json classes = ordered_json::object();
  for (int c = 0; c < 3; ++c) {
    classes[std::string(convert_class_name(static_cast<ConvertClass>(c)))] = {
        {"bytes_before", r.bytes_before[c]}, {"bytes_after", r.bytes_after[c]},
        {"saved_pct", saved_pct(r.bytes_before[c], r.bytes_after[c])}};
  }
  ordered_json tensors = ordered_json::array();
  for (const ConvertedTensor& t : r.converted) {
    tensors.push_back({{"name", t.name}, {"from", t.from}, {"to", t.to}, {"rel_rms", t.rel_rms}});
  }
  ordered_json worst_names = ordered_json::array();
  for (const ConvertedTensor& t : worst(r)) worst_names.push_back({{"name", t.name}, {"rel_rms", t.rel_rms}});
  return {{"in", r.in}, {"out", r.out}, {"shards", r.shards}, {"tensors_copied", r.tensors_copied},
          {"seconds", r.seconds}, {"classes", classes},
          {"total", {{"bytes_before", r.total_before()}, {"bytes_after", r.total_after()},
                     {"saved_pct", saved_pct(r.total_before(), r.total_after())}}},
          {"converted", tensors}, {"worst", worst_names}};
}

std::string format_nvfp4_dry_run(const std::string& model_or_dir) {
  const model::ModelPreset* preset = model::find_model_preset(model_or_dir);
  FP4_CHECK(preset || std::filesystem::exists(model_or_dir), "--model {}: expected a preset ({}) "
            "or a checkpoint directory", model_or_dir, model::model_preset_names());
  const model::ModelConfig config = preset ? model::parse_model_config(std::string(preset->config_json), model_or_dir)
                                           : model::load_model_config(model_or_dir);
  // A directory's own format is not known from config.json; MXFP8 is what --experts nvfp4 is
  // meant to shrink.
  const model::QuantScheme from = preset ? preset->scheme : model::QuantScheme::kMXFP8;
  const model::WeightBreakdown before = model::count_weights(config, from);
  const model::WeightBreakdown after = model::count_weights(config, model::QuantScheme::kNVFP4Experts);
  int64_t b[3] = {0, 0, 0}, a[3] = {0, 0, 0};
  for (const auto& g : before.groups) b[static_cast<int>(report_class(g.cls))] += g.bytes;
  for (const auto& g : after.groups) a[static_cast<int>(report_class(g.cls))] += g.bytes;
  std::string s = fmt::format("fp4serve convert --dry-run: {} ({} -> {}), weights counted by the "
                              "planner's size model (no files read or written)\n", model_or_dir,
                              model::quant_scheme_name(from), model::quant_scheme_name(model::QuantScheme::kNVFP4Experts));
  s += fmt::format("  {:<16} {:>14} {:>14} {:>8}\n", "class", "before", "after", "saved");
  for (int c = 0; c < 3; ++c) {
    s += fmt::format("  {:<16} {:>14} {:>14} {:>7.1f}%\n", convert_class_name(static_cast<ConvertClass>(c)),
                     gb(b[c]), gb(a[c]), saved_pct(b[c], a[c]));
  }
  s += fmt::format("  {:<16} {:>14} {:>14} {:>7.1f}%\n", "total", gb(before.total_bytes()),
                   gb(after.total_bytes()), saved_pct(before.total_bytes(), after.total_bytes()));
  const model::ModelPreset* nvfp4 = model::find_model_preset("minimax-m3.1-flash");
  if (preset && preset->name == "minimax-m3" && nvfp4) {
    const int64_t pub_before = preset->checkpoint.total_bytes, pub_after = nvfp4->checkpoint.total_bytes;
    s += fmt::format("  published: {} {} -> {} {} ({:.1f}% smaller)\n", preset->checkpoint.repository,
                     gb(pub_before), nvfp4->checkpoint.repository, gb(pub_after), saved_pct(pub_before, pub_after));
    s += fmt::format("  computed vs published: before {:+.2f}%, after {:+.2f}% (docs/convert.md says why)\n",
                     100.0 * (before.total_bytes() - pub_before) / pub_before,
                     100.0 * (after.total_bytes() - pub_after) / pub_after);
  }
  return s;
}

}  // namespace fp4::convert
