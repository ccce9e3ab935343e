// GPU expert-matmul rows of `fp4serve bench`. The device holds all 128 experts' weights, copies
// of 8 distinct random experts (the timing does not depend on the values, and uploading
// gigabytes would dominate the run); the check runs on those 8. Beside each NVFP4 row, the same
// layer with BF16 weights through cuBLAS: one GEMM per active expert, back to back on one stream.
// The plain NVFP4 rows are what the engine runs (the launcher's automatic choice); the marked
// rows are the FP16 kernel's two variants, the BF16-MMA kernel and the skinny kernel on the same
// inputs. Each of those times one call alone between two events (the host's launches included,
// and the same experts every time); the "(graph)" rows time 8 calls on 8 routings replayed from a
// CUDA graph, as a decode step runs the layer, for the launcher's choice and each other kernel.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <cublas_v2.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/expert_gemm.h"
#include "formats/minifloat.h"
#include "tools/fp4serve/bench_expert_gemm.h"

namespace fp4::bench {
namespace {

constexpr int64_t kExperts = 128, kTopK = 4, kDistinct = 8;
constexpr int64_t kHidden = 6144, kInter = 3072;
constexpr int kRoutings = 8;  // calls in a graph row

struct Matmul {
  const char* name;
  int64_t n, k;
};

struct Variant {
  cuda::ExpertGemmOptions options;
  const char* suffix;  // of the row's name
};
constexpr Variant kVariants[] = {
    {{cuda::ExpertGemmKernel::kAuto, cuda::ExpertGemmF16Variant::kAuto}, ""},
    {{cuda::ExpertGemmKernel::kF16, cuda::ExpertGemmF16Variant::kWarpRing}, " (f16 warp ring)"},
    {{cuda::ExpertGemmKernel::kF16, cuda::ExpertGemmF16Variant::kSharedX}, " (f16 shared x)"},
    {{cuda::ExpertGemmKernel::kBf16, cuda::ExpertGemmF16Variant::kAuto}, " (bf16 mma)"},
    {{cuda::ExpertGemmKernel::kSkinny, cuda::ExpertGemmF16Variant::kAuto}, " (skinny)"}};
// The skinny kernel streams an expert's weights once per row, so it is timed only where the
// experts have a row or two (the check's 24 rows among 8 experts and batch 1 and 16 of the sweep).
constexpr int64_t kSkinnyBenchMaxRows = 64;

bool runs(const Variant& v, int64_t rows) {
  return v.options.kernel != cuda::ExpertGemmKernel::kSkinny || rows <= kSkinnyBenchMaxRows;
}

// Fills `count` experts of `bytes_per_expert` on the device with copies of the first kDistinct.
void replicate(cuda::DeviceBuffer& d, int64_t bytes_per_expert) {
  for (int64_t done = kDistinct; done < kExperts; done *= 2) {
    const int64_t n = std::min(done, kExperts - done);
    FP4_CUDA_CHECK(cudaMemcpy(d.as<uint8_t>() + done * bytes_per_expert, d.data(),
                              static_cast<size_t>(n * bytes_per_expert), cudaMemcpyDeviceToDevice));
  }
}

// The 4 experts of each token, distinct, uniformly at random; rows grouped by expert.
std::vector<int32_t> route(int64_t batch, int64_t experts, std::mt19937_64& rng) {
  std::vector<int32_t> count(experts, 0), ids(experts);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t t = 0; t < batch; ++t) {
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t i = 0; i < kTopK; ++i) ++count[ids[i]];
  }
  std::vector<int32_t> offsets(experts + 1, 0);
  std::partial_sum(count.begin(), count.end(), offsets.begin() + 1);
  return offsets;
}

std::vector<uint16_t> activations(int64_t rows, int64_t k, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(rows * k);
  for (auto& v : x) v = bf16_encode(normal(rng));
  return x;
}

// y_e[rows_e, n] = x_e[rows_e, k] w_e[n, k]^T for every expert with rows, BF16 in, FP32 out and
// accumulation (column-major: y^T = w x^T, w's memory read as w^T).
void bf16_experts(cublasHandle_t h, const std::vector<int32_t>& offsets, const uint16_t* x, const uint16_t* w,
                  float* y, int64_t n, int64_t k) {
  const float one = 1.0f, zero = 0.0f;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    const cublasStatus_t status = cublasGemmEx(
        h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), rows, static_cast<int>(k), &one, w + int64_t(e) * n * k,
        CUDA_R_16BF, static_cast<int>(k), x + int64_t{offsets[e]} * k, CUDA_R_16BF, static_cast<int>(k), &zero,
        y + int64_t{offsets[e]} * n, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS) fail_internal("cublasGemmEx: {}", cublasGetStatusString(status));
  }
}

}  // namespace

std::vector<Row> bench_expert_gemm(const std::string& device, double copy_gbps, const Options& options) {
  const int reps = options.reps;
  std::vector<Row> rows;
  std::mt19937_64 rng(0xE4E7);
  std::uniform_int_distribution<int> byte(0, 255), scale_code(0x20, 0x48);
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) fail_internal("cublasCreate failed");
  for (const Matmul m : {Matmul{"gate+up", 2 * kInter, kHidden}, Matmul{"down", kHidden, kInter}}) {
    const int64_t value_bytes = m.n * m.k / 2, scale_bytes = m.n * m.k / 16;
    std::vector<uint8_t> values(kDistinct * value_bytes), scales(kDistinct * scale_bytes);
    for (auto& v : values) v = static_cast<uint8_t>(byte(rng));
    for (auto& s : scales) s = static_cast<uint8_t>(scale_code(rng));
    const std::vector<float> global(kExperts, 1.0f / 64);
    cuda::DeviceBuffer d_values(kExperts * value_bytes), d_scales(kExperts * scale_bytes);
    d_values.upload(values.data(), values.size());
    d_scales.upload(scales.data(), scales.size());
    replicate(d_values, value_bytes);
    replicate(d_scales, scale_bytes);
    const cuda::DeviceBuffer d_global = cuda::DeviceBuffer::copy_of(global);

    {  // The check, timed too: 6 tokens routed among the 8 distinct experts.
      const auto offsets = route(6, kDistinct, rng);
      const int64_t n_rows = offsets.back();
      const auto x = activations(n_rows, m.k, rng);
      std::vector<float> want(n_rows * m.n), got(want.size());
      ExpertGemmParams c{.x = x.data(), .row_offsets = offsets.data(), .values = values.data(),
                         .scales = scales.data(), .global_scales = global.data(), .y = want.data(),
                         .rows = n_rows, .experts = kDistinct, .n = m.n, .k = m.k};
      cpu::expert_gemm(c);
      const cuda::DeviceBuffer d_x = cuda::DeviceBuffer::copy_of(x), d_off = cuda::DeviceBuffer::copy_of(offsets);
      cuda::DeviceBuffer d_y(want.size() * 4);
      ExpertGemmParams d = c;
      d.x = d_x.as<uint16_t>();
      d.row_offsets = d_off.as<int32_t>();
      d.values = d_values.as<uint8_t>();
      d.scales = d_scales.as<uint8_t>();
      d.global_scales = d_global.as<float>();
      d.y = d_y.as<float>();
      // The kernel test's bound (tests/kernels/expert_gemm_test.cpp derives it):
      // |got - want| <= g S (2.125k + 4) u with S = sum |x w| of the output. (The FP16 kernel's
      // extra term for values below 2^-17 of their row's largest is far below it here.)
      std::vector<float> magnitude(want.size());
      ExpertGemmParams mc = c;
      mc.y = magnitude.data();
      cpu::expert_gemm_magnitude(mc);
      int64_t active = 0;
      for (int64_t e = 0; e < kDistinct; ++e) active += offsets[e + 1] > offsets[e];
      const double bytes = double(active) * (value_bytes + scale_bytes) + double(n_rows) * m.k * 2 +
                           double(n_rows) * m.n * 4;
      for (const Variant& v : kVariants) {
        d_y.fill(0xFF);
        cuda::expert_gemm(d, nullptr, v.options);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
        d_y.download(got.data(), got.size() * 4);
        int64_t bad = -1;
        for (size_t i = 0; i < want.size(); ++i) {
          if (!(std::abs(double{got[i]} - want[i]) <= magnitude[i] * (2.125 * m.k + 4) * 0x1p-24)) bad = int64_t(i);
        }
        if (bad >= 0) {
          fail_internal("expert_gemm ({}{}) disagrees with the CPU reference at row {}, feature {}: {} vs {}", m.name,
                        v.suffix, bad / m.n, bad % m.n, got[bad], want[bad]);
        }
        const double ms = cuda::median_ms([&](cudaStream_t s) { cuda::expert_gemm(d, s, v.options); }, 3, reps);
        rows.push_back({device, fmt::format("nvfp4 experts {}{}", m.name, v.suffix),
                        fmt::format("b6 top{} of {}, {} active, [{}, {}]", kTopK, kDistinct, active, m.n, m.k),
                        bytes, ms, copy_gbps, true});
      }
    }

    // BF16 weights of every expert (values do not change the timing: 0x3C3C is 0.0115).
    cuda::DeviceBuffer d_bf16(static_cast<size_t>(kExperts * m.n * m.k * 2));
    d_bf16.fill(0x3C);
    for (int64_t batch : batch_sweep("experts")) {
      if (!options.runs_batch(batch)) continue;
      const auto offsets = route(batch, kExperts, rng);
      const int64_t n_rows = offsets.back();
      int64_t active = 0;
      for (int64_t e = 0; e < kExperts; ++e) active += offsets[e + 1] > offsets[e];
      const auto x = activations(n_rows, m.k, rng);
      const cuda::DeviceBuffer d_x = cuda::DeviceBuffer::copy_of(x), d_off = cuda::DeviceBuffer::copy_of(offsets);
      cuda::DeviceBuffer d_y(n_rows * m.n * 4);
      const ExpertGemmParams d{.x = d_x.as<uint16_t>(), .row_offsets = d_off.as<int32_t>(),
                               .values = d_values.as<uint8_t>(), .scales = d_scales.as<uint8_t>(),
                               .global_scales = d_global.as<float>(), .y = d_y.as<float>(), .rows = n_rows,
                               .experts = kExperts, .n = m.n, .k = m.k};
      const double bytes = double(active) * (value_bytes + scale_bytes) + double(n_rows) * m.k * 2 +
                           double(n_rows) * m.n * 4;
      const std::string shape =
          fmt::format("b{} top{} of {}, {} active, [{}, {}]", batch, kTopK, kExperts, active, m.n, m.k);
      for (const Variant& v : kVariants) {
        if (!runs(v, n_rows)) continue;
        const double ms =
            cuda::median_ms([&](cudaStream_t s) { cuda::expert_gemm(d, s, v.options); }, 3, reps);
        rows.push_back({device, fmt::format("nvfp4 experts {}{}", m.name, v.suffix), shape, bytes, ms, copy_gbps,
                        false});
      }
      const double bf16_bytes = double(active) * m.n * m.k * 2 + double(n_rows) * m.k * 2 + double(n_rows) * m.n * 4;
      const double bf16_ms = cuda::median_ms(
          [&](cudaStream_t s) {
            cublasSetStream(cublas, s);
            bf16_experts(cublas, offsets, d_x.as<uint16_t>(), d_bf16.as<uint16_t>(), d_y.as<float>(), m.n, m.k);
          },
          3, reps);
      rows.push_back({device, fmt::format("bf16 experts {}", m.name), shape, bf16_bytes, bf16_ms, copy_gbps, false});

      // As a decode step runs it: kRoutings routings of the batch back to back in one CUDA graph,
      // each its own set of experts (so each call reads its weights from DRAM, not from the L2
      // that the call before left, and no host launch sits between the calls), per call.
      std::vector<std::vector<int32_t>> routings;
      std::vector<cuda::DeviceBuffer> d_routings;
      double mean_active = 0;
      for (int r = 0; r < kRoutings; ++r) {
        routings.push_back(route(batch, kExperts, rng));
        for (int64_t e = 0; e < kExperts; ++e) mean_active += routings.back()[e + 1] > routings.back()[e];
        d_routings.push_back(cuda::DeviceBuffer::copy_of(routings.back()));
      }
      mean_active /= kRoutings;
      const std::string graph_shape = fmt::format("b{} top{} of {}, {:.1f} active, [{}, {}]", batch, kTopK, kExperts,
                                                  mean_active, m.n, m.k);
      // Each kernel too, where it is not the one the launcher picks, so that the choice is
      // measured as the engine runs it.
      const cuda::ExpertGemmKernel chosen = cuda::expert_gemm_kernel_for(d);
      for (const Variant& v : kVariants) {
        const bool automatic = v.options.kernel == cuda::ExpertGemmKernel::kAuto;
        const bool same_as_chosen =
            v.options.kernel == chosen && (chosen != cuda::ExpertGemmKernel::kF16 ||
                                           v.options.f16_variant == cuda::expert_gemm_f16_variant_for(d));
        if (!runs(v, n_rows) || (!automatic && same_as_chosen)) continue;
        const double graph_ms = cuda::median_graph_ms(
                                    [&](cudaStream_t s) {
                                      for (const cuda::DeviceBuffer& o : d_routings) {
                                        ExpertGemmParams dr = d;
                                        dr.row_offsets = o.as<int32_t>();
                                        cuda::expert_gemm(dr, s, v.options);
                                      }
                                    },
                                    3, reps) /
                                kRoutings;
        const std::string suffix = automatic ? " (graph)" : fmt::format(" (graph, {}", v.suffix + 2);
        rows.push_back({device, fmt::format("nvfp4 experts {}{}", m.name, suffix), graph_shape,
                        mean_active * (value_bytes + scale_bytes) + double(n_rows) * m.k * 2 + double(n_rows) * m.n * 4,
                        graph_ms, copy_gbps, false});
      }
      const double bf16_graph_ms = cuda::median_graph_ms(
                                       [&](cudaStream_t s) {
                                         cublasSetStream(cublas, s);
                                         for (const auto& o : routings) {
                                           bf16_experts(cublas, o, d_x.as<uint16_t>(), d_bf16.as<uint16_t>(),
                                                        d_y.as<float>(), m.n, m.k);
                                         }
                                       },
                                       3, reps) /
                                   kRoutings;
      rows.push_back({device, fmt::format("bf16 experts {} (graph)", m.name), graph_shape,
                      mean_active * m.n * m.k * 2 + double(n_rows) * m.k * 2 + double(n_rows) * m.n * 4,
                      bf16_graph_ms, copy_gbps, false});
    }
  }
  cublasDestroy(cublas);
  return rows;
}

}  // namespace fp4::bench
