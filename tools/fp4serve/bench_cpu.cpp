#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/quantize.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "tools/fp4serve/bench.h"
#include "tools/fp4serve/bench_data.h"

namespace fp4::bench {

namespace {

template <typename Fn>
double median_wall_ms(Fn&& fn, int reps) {
  fn();  // warm-up: page faults, thread start
  std::vector<double> samples;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

std::vector<Row> run_cpu_benchmarks(const Options& options) {
  std::vector<Row> rows;
  const int64_t cols = 4096;
  const int64_t count = std::max<int64_t>(cols, options.cpu_tensor_bytes / 2 / cols * cols);
  const int64_t nrows = count / cols;
  const int reps = std::min(options.reps, 5);
  const std::string device = fmt::format("cpu ({} threads)", default_num_threads());

  // The ceiling is a copy on as many threads as the kernels use.
  std::vector<uint8_t> copy_src(count * 2, 1), copy_dst(count * 2);
  const double copy_ms = median_wall_ms([&] {
    parallel_for(nrows, [&](int64_t begin, int64_t end) {
      std::memcpy(copy_dst.data() + begin * cols * 2, copy_src.data() + begin * cols * 2, (end - begin) * cols * 2);
    });
  }, reps);
  const double copy_gbps = 2.0 * copy_src.size() / (copy_ms * 1e-3) / 1e9;
  rows.push_back({device, "memcpy, all threads (ceiling)", shape_string(nrows, cols), 2.0 * copy_src.size(), copy_ms, copy_gbps, false});

  const auto input = random_tensor(count, DType::kBF16, 1234);
  for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
    const int64_t value_bytes = format == BlockFormat::kNvfp4 ? count / 2 : count;
    const int64_t scale_bytes = count / block_elems(format);
    std::vector<uint8_t> values(value_bytes), scales(scale_bytes);
    std::vector<uint16_t> output(count);
    QuantizeParams q{input.data(), DType::kBF16, nrows, cols, cols, values.data(), scales.data(), 1.0f};
    DequantizeParams d{values.data(), scales.data(), 1.0f, nrows, cols, output.data(), DType::kBF16, cols};
    const std::string name = block_format_name(format);
    const double q_ms = median_wall_ms([&] { cpu::quantize(format, q); }, reps);
    rows.push_back({device, name + " quantize bf16", shape_string(nrows, cols),
                    double(count * 2 + value_bytes + scale_bytes), q_ms, copy_gbps, false});
    const double d_ms = median_wall_ms([&] { cpu::dequantize(format, d); }, reps);
    rows.push_back({device, name + " dequantize ->bf16", shape_string(nrows, cols),
                    double(count * 2 + value_bytes + scale_bytes), d_ms, copy_gbps, false});
  }
  return rows;
}

}  // namespace fp4::bench
