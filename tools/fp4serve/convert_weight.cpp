#include "tools/fp4serve/convert_weight.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "backend/cpu/quantize.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "formats/nvfp4.h"

namespace fp4::convert {
namespace {

// ||a - b|| / ||b|| in double, over all cores.
double relative_rms(std::span<const float> approx, std::span<const float> exact) {
  std::mutex mutex;
  double err = 0, ref = 0;
  parallel_for(static_cast<int64_t>(exact.size()), [&](int64_t begin, int64_t end) {
    double e = 0, r = 0;
    for (int64_t i = begin; i < end; ++i) {
      const double d = static_cast<double>(approx[i]) - exact[i];
      e += d * d;
      r += static_cast<double>(exact[i]) * exact[i];
    }
    std::lock_guard lock(mutex);
    err += e;
    ref += r;
  });
  return ref > 0 ? std::sqrt(err / ref) : std::sqrt(err);
}

float finite_amax(std::span<const float> w, std::string_view name) {
  std::mutex mutex;
  float amax = 0.0f;
  bool finite = true;
  parallel_for(static_cast<int64_t>(w.size()), [&](int64_t begin, int64_t end) {
    float a = 0.0f;
    bool f = true;
    for (int64_t i = begin; i < end; ++i) {
      f = f && std::isfinite(w[i]);
      a = std::max(a, std::fabs(w[i]));
    }
    std::lock_guard lock(mutex);
    amax = std::max(amax, a);
    finite = finite && f;
  });
  FP4_CHECK(finite, "tensor {} holds a NaN or infinite value; NVFP4's global scale needs finite "
            "weights", name);
  return amax;
}

}  // namespace

QuantizedWeight quantize_weight(std::span<const float> w, int64_t cols, WeightTarget target,
                                std::string_view name) {
  const int64_t n = static_cast<int64_t>(w.size());
  const int64_t rows = n / cols;
  std::vector<float> back(w.size());
  QuantizedWeight out;
  if (target == WeightTarget::kBf16) {
    out.values.resize(w.size() * 2);
    auto* bits = reinterpret_cast<uint16_t*>(out.values.data());
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        bits[i] = bf16_encode(w[i]);
        back[i] = bf16_decode(bits[i]);
      }
    });
    out.rel_rms = relative_rms(back, w);
    return out;
  }
  const bool nvfp4 = target == WeightTarget::kNvfp4;
  const BlockFormat format = nvfp4 ? BlockFormat::kNvfp4 : BlockFormat::kMxfp8;
  if (nvfp4) out.global_scale = nvfp4_global_scale_for_amax(finite_amax(w, name));
  out.values.resize(nvfp4 ? n / 2 : n);
  out.scales.resize(n / block_elems(format));
  QuantizeParams q;
  q.input = w.data();
  q.rows = rows;
  q.cols = cols;
  q.input_row_stride = cols;
  q.values = out.values.data();
  q.scales = out.scales.data();
  q.global_scale = out.global_scale;
  cpu::quantize(format, q);
  DequantizeParams d;
  d.values = out.values.data();
  d.scales = out.scales.data();
  d.global_scale = out.global_scale;
  d.rows = rows;
  d.cols = cols;
  d.output = back.data();
  d.output_row_stride = cols;
  cpu::dequantize(format, d);
  out.rel_rms = relative_rms(back, w);
  return out;
}

}  // namespace fp4::convert
