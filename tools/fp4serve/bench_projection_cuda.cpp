#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <memory>
#include <random>

#include "backend/buffer.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#include "backend/cuda/mxfp8_linear.h"
#include "backend/cuda/skinny_linear.h"
#include "core/check.h"
#include "formats/mxfp8.h"
#include "tools/fp4serve/bench_projection.h"

namespace fp4::bench {
namespace {

struct Projection {
  const char* name;
  int64_t n, k;
};
// q (64 heads x 128), o, and k (4 KV heads x 128): the widest, the deepest and a narrow one.
constexpr Projection kProjections[] = {{"q", 8192, 6144}, {"o", 6144, 8192}, {"k", 512, 6144}};

// A weight as an MXFP8 checkpoint holds it (Gaussian values quantized by blocks of 32), so that
// the FP32, BF16 and MXFP8 forms all hold the same numbers.
struct Weight {
  std::vector<float> values;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> codes, scales;
};
Weight random_mxfp8_weight(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  Weight w{std::vector<float>(static_cast<size_t>(n)), std::vector<uint16_t>(static_cast<size_t>(n)),
           std::vector<uint8_t>(static_cast<size_t>(n)), std::vector<uint8_t>(static_cast<size_t>(n / kMxfp8BlockElems))};
  for (float& f : w.values) f = normal(rng);
  for (size_t b = 0; b < w.scales.size(); ++b) {
    float* block = &w.values[b * kMxfp8BlockElems];
    w.scales[b] = mxfp8_quantize_block(block, &w.codes[b * kMxfp8BlockElems]);
    mxfp8_dequantize_block(&w.codes[b * kMxfp8BlockElems], w.scales[b], block);
  }
  for (size_t i = 0; i < w.values.size(); ++i) {
    w.bf16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(w.values[i]) >> 16);
    FP4_CHECK(std::bit_cast<uint32_t>(w.values[i]) << 16 == 0, "an MXFP8 weight value is not a BF16");
  }
  return w;
}

// The largest |gpu - cpu| over S = sum |x w| of the output, against the bound of
// tests/kernels/cuda_backend_test.cpp (gamma_k + 1.01 gamma'_{k+2}, u = 2^-24, u' = 2^-23).
void check(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& got, int64_t m,
           int64_t n, int64_t k, const char* what) {
  std::vector<float> want(static_cast<size_t>(m * n));
  cpu::linear({.x = x.data(), .w = w.data(), .y = want.data(), .m = m, .n = n, .k = k});
  const double u = 0x1p-24, gamma = k * u / (1 - k * u), gamma_tc = (k + 2) * 2 * u / (1 - (k + 2) * 2 * u);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double mag = 0;
      for (int64_t l = 0; l < k; ++l) mag += std::abs(double(x[i * k + l]) * w[j * k + l]);
      const double diff = std::abs(double(got[i * n + j]) - want[i * n + j]);
      if (!(diff <= (gamma + 1.01 * gamma_tc) * mag)) {
        fail_internal("{} linear disagrees with the CPU at ({}, {}): {} vs {}", what, i, j, got[i * n + j],
                      want[i * n + j]);
      }
    }
  }
}

// An M3 attention layer's five projections of one input (q, k, v, index_q, index_k), as the
// forward pass issues them (Backend::linears): on BF16-held weights (the skinny kernel's group
// launch where it fits, else one product after another) and on MXFP8-held ones (the skinny
// group, else the tensor-core kernel's group launch, else one by one). The MXFP8 group is checked
// against the CPU at 16 rows. Each is timed one call at a time, the host's launches and the
// workspace's allocation inside every sample, and in "(graph)" rows as a decode step runs it:
// kGraphCalls calls recorded back to back, per call.
constexpr Projection kGroup[] = {{"q", 8192, 6144}, {"k", 512, 6144}, {"v", 512, 6144}, {"index_q", 512, 6144},
                                 {"index_k", 128, 6144}};

constexpr int kGraphCalls = 8;

void bench_projection_group(cuda::CudaBackend& gpu, const std::string& device, double copy_gbps, int reps,
                            std::mt19937_64& rng, std::vector<Row>& rows) {
  const auto graph_ms = [&](const std::vector<LinearParams>& parts) {
    gpu.begin_capture();
    for (int i = 0; i < kGraphCalls; ++i) gpu.linears(parts);
    const std::unique_ptr<CapturedOps> graph = gpu.end_capture();
    return cuda::median_ms([&](cudaStream_t) { graph->replay(); }, 3, reps, gpu.stream()) / kGraphCalls;
  };
  const int64_t k = kGroup[0].k;
  std::vector<Weight> weights;
  std::vector<Buffer<uint16_t>> w16;
  std::vector<Buffer<uint8_t>> w8, w8_scales;
  int64_t features = 0;
  for (const Projection& p : kGroup) {
    weights.push_back(random_mxfp8_weight(p.n * p.k, rng));
    w16.emplace_back(gpu, weights.back().bf16);
    w8.emplace_back(gpu, weights.back().codes);
    w8_scales.emplace_back(gpu, weights.back().scales);
    features += p.n;
  }
  for (int64_t m : {1, 4, 8, 16, 32, 64}) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(m * k));
    for (float& f : x) f = normal(rng);
    const Buffer<float> dx(gpu, x);
    std::vector<Buffer<float>> dy;
    std::vector<LinearParams> bf16, mx;
    for (size_t i = 0; i < std::size(kGroup); ++i) {
      dy.emplace_back(gpu, static_cast<size_t>(m * kGroup[i].n));
      bf16.push_back(
          {.x = dx.data(), .y = dy.back().data(), .m = m, .n = kGroup[i].n, .k = k, .w_bf16 = w16[i].data()});
      mx.push_back({.x = dx.data(), .y = dy.back().data(), .m = m, .n = kGroup[i].n, .k = k, .w_e4m3 = w8[i].data(),
                    .w_scales = w8_scales[i].data()});
    }
    const bool fresh = m == 16;
    if (fresh) {
      gpu.linears(mx);
      for (size_t i = 0; i < std::size(kGroup); ++i)
        check(x, weights[i].values, dy[i].download(), m, kGroup[i].n, k, "MXFP8-weight group");
    }
    const std::string shape = fmt::format("m{} [{}, {}] q,k,v,index_q,index_k", m, features, k);
    const double io = double(m) * k * 4 + double(m) * features * 4;
    const double ms16 = cuda::median_ms([&](cudaStream_t) { gpu.linears(bf16); }, 3, reps, gpu.stream());
    rows.push_back({device, "linears bf16 weights (as the layer runs them)", shape, double(features) * k * 2 + io, ms16,
                    copy_gbps, fresh});
    const double ms8 = cuda::median_ms([&](cudaStream_t) { gpu.linears(mx); }, 3, reps, gpu.stream());
    const double mx_bytes = double(features) * k * (1 + 1.0 / kMxfp8BlockElems) + io;
    rows.push_back({device, "linears mxfp8 weights (as the layer runs them)", shape, mx_bytes, ms8, copy_gbps, fresh});
    rows.push_back({device, "linears bf16 weights (graph)", shape, double(features) * k * 2 + io, graph_ms(bf16),
                    copy_gbps, false});
    rows.push_back({device, "linears mxfp8 weights (graph)", shape, mx_bytes, graph_ms(mx), copy_gbps, false});
  }
}

}  // namespace

std::vector<Row> bench_projections(const std::string& device, double copy_gbps, int reps) {
  std::vector<Row> rows;
  std::mt19937_64 rng(0x11AE);
  cuda::CudaBackend gpu;
  for (const Projection& p : kProjections) {
    const Weight weight = random_mxfp8_weight(p.n * p.k, rng);
    const std::vector<float>& w = weight.values;
    const Buffer<float> w32(gpu, w);
    const Buffer<uint16_t> w16(gpu, weight.bf16);
    const Buffer<uint8_t> w8(gpu, weight.codes), w8_scales(gpu, weight.scales);
    bool checked = false;
    for (int64_t m : {1, 4, 8, 16, 64, 256, 8192}) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(m * p.k));
      for (float& f : x) f = normal(rng);
      const Buffer<float> dx(gpu, x);
      Buffer<float> dy(gpu, static_cast<size_t>(m * p.n));
      const LinearParams f32{.x = dx.data(), .w = w32.data(), .y = dy.data(), .m = m, .n = p.n, .k = p.k};
      LinearParams bf16 = f32;
      bf16.w = nullptr;
      bf16.w_bf16 = w16.data();
      LinearParams mx = f32;
      mx.w = nullptr;
      mx.w_e4m3 = w8.data();
      mx.w_scales = w8_scales.data();
      // The shapes linear gives the skinny kernel (decode-sized inputs): timed beside the three
      // products, and checked at every such m.
      const bool skinny = cuda::detail::skinny_linear_fits(
          {.x = dx.data(), .w = w16.data(), .y = dy.data(), .m = m, .n = p.n, .k = p.k});
      // The tensor-core kernel on MXFP8 codes (decode batches past the skinny kernel's): checked
      // at its first row count.
      const bool mma = !skinny && cuda::detail::mxfp8_linear_fits({.x = dx.data(), .w_e4m3 = w8.data(),
                                                                   .w_scales = w8_scales.data(), .y = dy.data(),
                                                                   .m = m, .n = p.n, .k = p.k});
      const bool check_mma = mma && m == 16;
      if (!checked || skinny) {
        gpu.linear(f32);
        check(x, w, dy.download(), m, p.n, p.k, "FP32-weight");
        gpu.set_bf16_linear(cuda::CudaBackend::Bf16Linear::kSplitMma);
        gpu.linear(bf16);
        check(x, w, dy.download(), m, p.n, p.k, "BF16-weight");
        gpu.set_bf16_linear(cuda::CudaBackend::Bf16Linear::kAuto);
        if (skinny) {
          gpu.linear(bf16);
          check(x, w, dy.download(), m, p.n, p.k, "BF16-weight skinny");
        }
      }
      if (!checked || skinny || check_mma) {
        gpu.linear(mx);
        check(x, w, dy.download(), m, p.n, p.k, "MXFP8-weight");
      }
      const bool fresh = !checked || skinny || check_mma;
      const std::string shape = fmt::format("m{} [{}, {}] {}", m, p.n, p.k, p.name);
      const double io = double(m) * p.k * 4 + double(m) * p.n * 4;
      const double ms32 = cuda::median_ms([&](cudaStream_t) { gpu.linear(f32); }, 3, reps, gpu.stream());
      rows.push_back({device, "linear fp32 weight (sgemm)", shape, double(p.n) * p.k * 4 + io, ms32, copy_gbps,
                      fresh});
      gpu.set_bf16_linear(cuda::CudaBackend::Bf16Linear::kSplitMma);
      const double ms16 = cuda::median_ms([&](cudaStream_t) { gpu.linear(bf16); }, 3, reps, gpu.stream());
      gpu.set_bf16_linear(cuda::CudaBackend::Bf16Linear::kAuto);
      rows.push_back({device, "linear bf16 weight (3 x bf16 mma)", shape, double(p.n) * p.k * 2 + io, ms16,
                      copy_gbps, fresh});
      if (skinny) {
        const double ms = cuda::median_ms([&](cudaStream_t) { gpu.linear(bf16); }, 3, reps, gpu.stream());
        rows.push_back({device, "linear bf16 weight (skinny fp32 fma)", shape, double(p.n) * p.k * 2 + io, ms,
                        copy_gbps, fresh});
      }
      // MXFP8: the skinny kernel at decode sizes, the FP16 tensor-core kernel on the codes for
      // decode batches, else the weight decoded to BF16 and the three products; the bytes that
      // must move are the codes and scales.
      const double ms8 = cuda::median_ms([&](cudaStream_t) { gpu.linear(mx); }, 3, reps, gpu.stream());
      rows.push_back({device,
                      skinny ? "linear mxfp8 weight (skinny fp32 fma)"
                      : mma  ? "linear mxfp8 weight (fp16 mma on codes)"
                             : "linear mxfp8 weight (to bf16, 3 x mma)",
                      shape, double(p.n) * p.k * (1 + 1.0 / kMxfp8BlockElems) + io, ms8, copy_gbps, fresh});
      checked = true;
    }
  }
  bench_projection_group(gpu, device, copy_gbps, reps, rng, rows);
  return rows;
}

}  // namespace fp4::bench
