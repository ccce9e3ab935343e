// GPU half of `fp4serve bench`. Sizes: the float-side tensor is --gpu-bytes (1 GiB by default),
// far larger than the 60 MB L2, so every timed launch streams from HBM.
#include <fmt/format.h>

#include <cstring>

#include "backend/cpu/quantize.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/quantize.h"
#include "tools/fp4serve/bench.h"
#include "tools/fp4serve/bench_data.h"
#include "tools/fp4serve/bench_expert_gemm.h"
#include "tools/fp4serve/bench_projection.h"
#include "tools/fp4serve/bench_model.h"
#include "tools/fp4serve/bench_attention.h"
#include "tools/fp4serve/bench_indexer.h"
#include "tools/fp4serve/bench_page_read.h"
#include "tools/fp4serve/bench_pre_attention.h"

namespace fp4::bench {

constexpr int64_t kCols = 16384;

std::vector<Row> run_gpu_benchmarks(const Options& options, std::string& why) {
  if (cuda::device_count() == 0) {
    why = "no CUDA device is visible";
    return {};
  }
  const cuda::DeviceInfo info = cuda::device_info(0);
  const std::string device = info.name;
  fmt::print(stderr, "fp4serve bench: {} (sm_{}{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB)\n", info.name,
             info.sm_major, info.sm_minor, info.multiprocessors,
             info.global_memory_bytes / double(1 << 30), info.l2_bytes / double(1 << 20));
  // As the engine's backend does: ops that take scratch from the stream-ordered allocator would
  // otherwise time the driver mapping it again after every synchronization.
  cuda::keep_freed_memory_in_pool(0);
  std::vector<Row> rows;

  // Ceiling: a device-to-device copy of the same size, counting bytes read plus written.
  const size_t copy_bytes = static_cast<size_t>(options.gpu_tensor_bytes);
  cuda::DeviceBuffer a(copy_bytes), b(copy_bytes);
  a.fill(0x3C);
  const double copy_ms = cuda::median_ms(
      [&](cudaStream_t s) { FP4_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), copy_bytes, cudaMemcpyDeviceToDevice, s)); },
      3, options.reps);
  const double copy_gbps = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  rows.push_back({device, "cudaMemcpy D2D (ceiling)", fmt::format("{} MiB", copy_bytes >> 20),
                  2.0 * copy_bytes, copy_ms, copy_gbps, false});
  a = cuda::DeviceBuffer();
  b = cuda::DeviceBuffer();

  for (DType dtype : {DType::kBF16, DType::kF32}) {
    if (!options.runs("quantize")) break;
    const int elem = dtype_bits(dtype) / 8;
    const int64_t rows_n = options.gpu_tensor_bytes / elem / kCols;
    const int64_t count = rows_n * kCols;
    const auto host_input = random_tensor(count, dtype, 0xC0FFEE + elem);
    cuda::DeviceBuffer d_input(host_input.size()), d_output(host_input.size());
    d_input.upload(host_input.data(), host_input.size());
    for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
      const int64_t value_bytes = format == BlockFormat::kNvfp4 ? count / 2 : count;
      const int64_t scale_bytes = count / block_elems(format);
      cuda::DeviceBuffer d_values(value_bytes), d_scales(scale_bytes);
      // NVFP4 with a global scale from the data's amax range, as a checkpoint would carry.
      const float g = format == BlockFormat::kNvfp4 ? 0.75f : 1.0f;
      QuantizeParams q{d_input.data(), dtype, rows_n, kCols, kCols, d_values.as<uint8_t>(), d_scales.as<uint8_t>(), g};
      DequantizeParams d{d_values.as<uint8_t>(), d_scales.as<uint8_t>(), g, rows_n, kCols, d_output.data(), dtype, kCols};

      // Validate once against the CPU reference on the same input.
      std::vector<uint8_t> ref_values(value_bytes), ref_scales(scale_bytes), gpu_values(value_bytes), gpu_scales(scale_bytes);
      QuantizeParams qc = q;
      qc.input = host_input.data(); qc.values = ref_values.data(); qc.scales = ref_scales.data();
      cpu::quantize(format, qc);
      d_values.fill(0xA5);
      d_scales.fill(0xA5);
      cuda::quantize(format, q, nullptr);
      FP4_CUDA_CHECK(cudaDeviceSynchronize());
      d_values.download(gpu_values.data(), value_bytes);
      d_scales.download(gpu_scales.data(), scale_bytes);
      const bool q_ok = gpu_values == ref_values && gpu_scales == ref_scales;

      std::vector<uint8_t> ref_out(host_input.size()), gpu_out(host_input.size());
      DequantizeParams dc = d;
      dc.values = ref_values.data(); dc.scales = ref_scales.data(); dc.output = ref_out.data();
      cpu::dequantize(format, dc);
      d_output.fill(0xA5);
      cuda::dequantize(format, d, nullptr);
      FP4_CUDA_CHECK(cudaDeviceSynchronize());
      d_output.download(gpu_out.data(), gpu_out.size());
      const bool d_ok = std::memcmp(gpu_out.data(), ref_out.data(), ref_out.size()) == 0;

      const double moved = double(count * elem + value_bytes + scale_bytes);
      const std::string name = block_format_name(format);
      const std::string dt(dtype_name(dtype));
      const double q_ms = cuda::median_ms([&](cudaStream_t s) { cuda::quantize(format, q, s); }, 3, options.reps);
      rows.push_back({device, fmt::format("{} quantize {}", name, dt), shape_string(rows_n, kCols), moved, q_ms, copy_gbps, q_ok});
      const double d_ms = cuda::median_ms([&](cudaStream_t s) { cuda::dequantize(format, d, s); }, 3, options.reps);
      rows.push_back({device, fmt::format("{} dequantize ->{}", name, dt), shape_string(rows_n, kCols), moved, d_ms, copy_gbps, d_ok});
      if (!q_ok || !d_ok)
        fail_internal("{} {} kernels disagree with the CPU reference (quantize {}, dequantize {})",
                      name, dt, q_ok ? "ok" : "MISMATCH", d_ok ? "ok" : "MISMATCH");
    }
  }
  auto append = [&](std::vector<Row> more) {
    for (Row& r : more) rows.push_back(std::move(r));
  };
  if (options.runs("attention")) append(bench_paged_attention(device, copy_gbps, options));
  if (options.runs("prefill")) append(bench_prefill_attention(device, copy_gbps, options.reps));
  if (options.runs("indexer")) append(bench_indexer(device, copy_gbps, options));
  if (options.runs("page-read")) append(bench_page_read(device, copy_gbps, options.reps));
  if (options.runs("pre-attention")) append(bench_pre_attention(device, copy_gbps, options.reps));
  if (options.runs("experts")) append(bench_expert_gemm(device, copy_gbps, options));
  if (options.runs("projections")) append(bench_projections(device, copy_gbps, options.reps));
  if (options.runs("model")) append(bench_model_decode(device, copy_gbps, options));
  return rows;
}

}  // namespace fp4::bench
