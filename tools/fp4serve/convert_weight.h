// One weight of a conversion: FP32 values re-encoded as NVFP4 (ModelOpt's recipe, with the
// global scale from the tensor's amax), MXFP8 or BF16, with the relative error of the result.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp4::convert {

enum class WeightTarget { kNvfp4, kMxfp8, kBf16 };

struct QuantizedWeight {
  std::vector<uint8_t> values;  // NVFP4: [rows, cols/2] packed E2M1; MXFP8: E4M3; BF16: bits
  std::vector<uint8_t> scales;  // NVFP4: [rows, cols/16] E4M3; MXFP8: [rows, cols/32] E8M0
  float global_scale = 1.0f;    // NVFP4's weight_scale_2, amax / (6 * 448)
  double rel_rms = 0;           // ||decode(values) - w|| / ||w||
};

// `w` is row-major with `cols` a multiple of the target's block. Throws fp4::Error naming
// `name` for a NaN or infinite value under NVFP4 (its global scale needs a finite amax).
QuantizedWeight quantize_weight(std::span<const float> w, int64_t cols, WeightTarget target,
                                std::string_view name);

}  // namespace fp4::convert
