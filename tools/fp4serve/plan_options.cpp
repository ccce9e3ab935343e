// GPU presets, number parsing and the resolution of parallelism flags for `fp4serve plan`.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "tools/fp4serve/plan.h"

namespace fp4::cli::plan {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

// vLLM multiplies gpu-memory-utilization by the total the driver reports, which is not the
// marketing figure: Hopper's "80 GB"/"141 GB" are GiB-sized, Blackwell's "192 GB"/"288 GB"
// are decimal GB. So the presets use the driver's total where public nvidia-smi logs give it.
const std::vector<GpuPreset>& gpu_presets() {
  static const std::vector<GpuPreset> presets = {
      {"h100", "NVIDIA H100 80GB", 80, 81559 * kMiB, "81,559 MiB as nvidia-smi reports"},
      {"h200", "NVIDIA H200 141GB", 141, 143771 * kMiB, "143,771 MiB as nvidia-smi reports"},
      {"b200", "NVIDIA B200", 192, 183359 * kMiB, "183,359 MiB as nvidia-smi reports"},
      {"b300", "NVIDIA B300", 288, 275040 * kMiB, "275,040 MiB as nvidia-smi reports"},
      {"gb300", "NVIDIA GB300", 288, 284208 * kMiB, "284,208 MiB as nvidia-smi reports"},
      // No driver figure on hand. AMD's capacities are binary (an MI300X reports
      // 206,141,652,992 B for its "192 GB"), so 288 GB is taken as 288 GiB.
      {"mi355x", "AMD Instinct MI355X", 288, 288 * kGiB, "288 GiB, assumed like the MI300X"},
  };
  return presets;
}

const GpuPreset* lookup_gpu(std::string_view name) {
  const std::string key = lower(name);
  for (const auto& g : gpu_presets()) {
    if (g.name == key) return &g;
  }
  return nullptr;
}

const GpuPreset& find_gpu(std::string_view name) {
  if (const GpuPreset* g = lookup_gpu(name)) return *g;
  std::string known;
  for (const auto& g : gpu_presets()) known += (known.empty() ? "" : ", ") + std::string(g.name);
  fail("--gpu '{}' is not a known GPU; expected one of {} (or give --gpu-memory-gb)", name, known);
}

int64_t parse_token_count(std::string_view text, std::string_view flag) {
  std::string s = lower(text);
  FP4_CHECK(!s.empty(), "{} is empty; expected a token count such as 4096, 256k or 1m", flag);
  int64_t multiplier = 1;
  if (s.back() == 'k') multiplier = 1024;
  if (s.back() == 'm') multiplier = 1024 * 1024;
  if (multiplier != 1) s.pop_back();
  // Exact decimal arithmetic: "1.5k" is 1536 tokens, "0.3k" is not a whole number.
  const size_t dot = s.find('.');
  const std::string whole = s.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  const auto digits = [](const std::string& d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const bool valid = !(whole.empty() && frac.empty()) && digits(whole) && digits(frac) &&
                     whole.size() + frac.size() <= 12 && (dot == std::string::npos || !frac.empty());
  FP4_CHECK(valid, "{} '{}' is not a token count; expected an integer with an optional k "
            "(x1024) or m (x1048576) suffix, e.g. 4096, 256k, 1m", flag, text);
  int64_t mantissa = 0, scale = 1;
  for (char c : whole + frac) mantissa = mantissa * 10 + (c - '0');
  for (size_t i = 0; i < frac.size(); ++i) scale *= 10;
  FP4_CHECK((mantissa * multiplier) % scale == 0, "{} '{}' is not a whole number of tokens",
            flag, text);
  const int64_t tokens = mantissa * multiplier / scale;
  FP4_CHECK(tokens > 0, "{} must be positive, got '{}'", flag, text);
  return tokens;
}

int64_t parse_byte_size(std::string_view text, std::string_view flag) {
  const std::string s(text);
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  const std::string unit = lower(std::string_view(end));
  const std::pair<const char*, double> units[] = {
      {"", 1},           {"b", 1},          {"kb", 1e3},          {"mb", 1e6},
      {"gb", 1e9},       {"tb", 1e12},      {"kib", 1024.0},      {"mib", 1048576.0},
      {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  const auto* u = std::find_if(std::begin(units), std::end(units),
                               [&](const auto& p) { return unit == p.first; });
  FP4_CHECK(end != s.c_str() && u != std::end(units) && std::isfinite(number) && number > 0,
            "{} '{}' is not a byte size; expected a positive number with an optional unit "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 250116419880 or 451.5GB", flag, text);
  const double bytes = std::round(number * u->second);
  FP4_CHECK(bytes < 9.0e18, "{} '{}' is too large", flag, text);
  return static_cast<int64_t>(bytes);
}

std::string Parallelism::label() const {
  if (dep) return fmt::format("DEP{}", dp);
  std::string s;
  if (dp > 1) s += fmt::format("DP{}", dp);
  if (tp > 1 || dp == 1) s += fmt::format("{}TP{}", s.empty() ? "" : " x ", tp);
  if (ep > 1) s += fmt::format(", EP{}", ep);
  return s;
}

Parallelism resolve_parallelism(const Options& o, const model::ModelConfig& c) {
  for (const auto& [value, flag] : {std::pair{o.num_gpus, "--num-gpus"}, {o.tp, "--tp"},
                                    {o.dp, "--dp"}, {o.ep, "--ep"}, {o.dep, "--dep"}}) {
    FP4_CHECK(!value || *value > 0, "{} must be a positive integer, got {}", flag, *value);
  }
  Parallelism p;
  if (o.dep) {
    // DEP N: data-parallel attention on every GPU (no TP), experts spread over all N.
    const int n = *o.dep;
    FP4_CHECK(!o.tp || *o.tp == 1, "--dep {} means --dp {} --tp 1 --ep {}, but --tp {} was given",
              n, n, n, *o.tp);
    FP4_CHECK(!o.dp || *o.dp == n, "--dep {} means --dp {}, but --dp {} was given", n, n, *o.dp);
    FP4_CHECK(!o.ep || *o.ep == n, "--dep {} spreads the experts over {} GPUs, but --ep {} was "
              "given", n, n, *o.ep);
    p.dp = n;
    p.tp = 1;
    p.dep = true;
  } else if (o.tp || o.dp) {
    p.tp = o.tp.value_or(0);
    p.dp = o.dp.value_or(0);
    if (p.tp == 0) {
      FP4_CHECK(!o.num_gpus || *o.num_gpus % p.dp == 0, "--num-gpus {} is not a multiple of "
                "--dp {}", o.num_gpus.value_or(0), p.dp);
      p.tp = o.num_gpus ? *o.num_gpus / p.dp : 1;
    }
    if (p.dp == 0) {
      FP4_CHECK(!o.num_gpus || *o.num_gpus % p.tp == 0, "--num-gpus {} is not a multiple of "
                "--tp {}", o.num_gpus.value_or(0), p.tp);
      p.dp = o.num_gpus ? *o.num_gpus / p.tp : 1;
    }
  } else {
    p.tp = o.num_gpus.value_or(1);  // like vLLM: one engine, tensor parallel over every GPU
  }
  FP4_CHECK(!o.num_gpus || *o.num_gpus == p.num_gpus(),
            "--num-gpus {} does not match the parallelism: {} data-parallel rank(s) x {} "
            "tensor-parallel GPU(s) = {} GPUs", *o.num_gpus, p.dp, p.tp, p.num_gpus());
  layout_check(c.num_heads % p.tp == 0, "--tp {} does not divide the model's {} attention heads "
               "({} / {} is not a whole number)", p.tp, c.num_heads, c.num_heads, p.tp);
  layout_check(c.num_kv_heads % p.tp == 0 || p.tp % c.num_kv_heads == 0,
               "--tp {} must divide, or be a multiple of, the model's {} KV heads", p.tp,
               c.num_kv_heads);
  // Like vLLM, MoE layers use every GPU by default (whole experts with EP, slices without).
  p.ep = o.ep.value_or(p.num_gpus());
  const std::string ep_from =
      o.dep  ? fmt::format("--dep {} spreads the routed experts over {} GPUs", p.dp, p.ep)
      : o.ep ? fmt::format("--ep {} spreads the routed experts over {} GPUs", p.ep, p.ep)
             : fmt::format("the routed experts go over all {} GPUs (--ep {} by default)", p.ep,
                           p.ep);
  layout_check(p.num_gpus() % p.ep == 0, "{}, but {} does not divide the {} GPUs of the "
               "deployment (each group of --ep GPUs holds one copy of the experts)", ep_from,
               p.ep, p.num_gpus());
  // The planner places whole experts, and an uneven split would leave the fullest GPU the
  // bottleneck of every MoE layer, so the experts must split evenly.
  layout_check(!c.is_moe() || c.num_experts % p.ep == 0, "{}, but {} does not divide the "
               "model's {} routed experts ({} / {} is not a whole number); choose a divisor "
               "of {}", ep_from, p.ep, c.num_experts, c.num_experts, p.ep, c.num_experts);
  return p;
}

}  // namespace fp4::cli::plan
