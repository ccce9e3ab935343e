// The CUDA quantize/dequantize kernels must produce exactly the CPU reference's bytes: codes,
// scales and dequantized values, on fresh random inputs with special values mixed in. Outputs
// are poisoned with two different byte patterns in two runs, so an element the kernel fails to
// write cannot match by luck.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "backend/cpu/quantize.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/quantize.h"
#include "formats/minifloat.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using testing::Distribution;

struct Case {
  BlockFormat format;
  DType dtype;
  int64_t rows, cols, stride;
  Distribution dist;
  float global_scale;
};

std::string describe(const Case& c) {
  return fmt::format("{} {} {}x{} stride {} g={}", block_format_name(c.format), dtype_name(c.dtype),
                     c.rows, c.cols, c.stride, c.global_scale);
}

// Random input rows (with padding between rows) holding a few NaN, inf, huge, tiny and -0.
std::vector<uint8_t> make_input(const Case& c, std::mt19937_64& rng) {
  auto values = testing::random_floats(static_cast<size_t>(c.rows * c.stride), c.dist, rng);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 3e38f, -1e30f, 1e-30f, -0.0f, 1e-7f};
  for (float s : specials) values[pick(rng)] = s;
  const int elem = dtype_bits(c.dtype) / 8;
  std::vector<uint8_t> bytes(values.size() * elem);
  for (size_t i = 0; i < values.size(); ++i) {
    if (c.dtype == DType::kBF16) {
      const uint16_t h = bf16_encode(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    }
  }
  return bytes;
}

void run_case(const Case& c, std::mt19937_64& rng) {
  SCOPED_TRACE(describe(c));
  const auto input = make_input(c, rng);
  const int64_t value_bytes = c.format == BlockFormat::kNvfp4 ? c.rows * c.cols / 2 : c.rows * c.cols;
  const int64_t scale_bytes = c.rows * c.cols / block_elems(c.format);

  std::vector<uint8_t> ref_values(value_bytes), ref_scales(scale_bytes);
  QuantizeParams q{input.data(), c.dtype, c.rows, c.cols, c.stride, ref_values.data(), ref_scales.data(), c.global_scale};
  cpu::quantize(c.format, q);

  cuda::DeviceBuffer d_input(input.size()), d_values(value_bytes), d_scales(scale_bytes);
  d_input.upload(input.data(), input.size());
  QuantizeParams qd = q;
  qd.input = d_input.data();
  qd.values = d_values.as<uint8_t>();
  qd.scales = d_scales.as<uint8_t>();
  std::vector<uint8_t> got_values(value_bytes), got_scales(scale_bytes);
  for (unsigned char poison : {0xA5, 0x5A}) {
    d_values.fill(poison);
    d_scales.fill(poison);
    cuda::quantize(c.format, qd, nullptr);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    d_values.download(got_values.data(), value_bytes);
    d_scales.download(got_scales.data(), scale_bytes);
    for (int64_t i = 0; i < value_bytes; ++i)
      ASSERT_EQ(got_values[i], ref_values[i]) << "value byte " << i << " poison " << int(poison);
    for (int64_t i = 0; i < scale_bytes; ++i)
      ASSERT_EQ(got_scales[i], ref_scales[i]) << "scale " << i << " poison " << int(poison);
  }

  // Dequantize the reference codes on both sides into strided rows; the padding between rows
  // must keep its poison on the GPU exactly as on the CPU.
  const int elem = dtype_bits(c.dtype) / 8;
  const size_t out_bytes = static_cast<size_t>(c.rows * c.stride * elem);
  cuda::DeviceBuffer d_out(out_bytes);
  for (unsigned char poison : {0xA5, 0x5A}) {
    std::vector<uint8_t> ref_out(out_bytes, poison), got_out(out_bytes);
    DequantizeParams d{ref_values.data(), ref_scales.data(), c.global_scale, c.rows, c.cols,
                       ref_out.data(), c.dtype, c.stride};
    cpu::dequantize(c.format, d);
    DequantizeParams dd = d;
    dd.values = d_values.as<uint8_t>();
    dd.scales = d_scales.as<uint8_t>();
    dd.output = d_out.data();
    d_out.fill(poison);
    cuda::dequantize(c.format, dd, nullptr);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    d_out.download(got_out.data(), out_bytes);
    for (size_t i = 0; i < out_bytes; ++i)
      ASSERT_EQ(got_out[i], ref_out[i]) << "output byte " << i << " poison " << int(poison);
  }
}

class QuantizeKernels : public testing::GpuTest {};

TEST_F(QuantizeKernels, BitExactAgainstCpuReference) {
  auto rng = testing::seeded_rng(1);
  std::uniform_real_distribution<float> log_g(-12.0f, 4.0f);
  for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (auto [rows, cols, pad] : {std::tuple<int64_t, int64_t, int64_t>{1, 32, 0}, {7, 96, 32},
                                     {129, 4096, 0}, {1000, 6144, 64}, {3, 18432, 8}}) {
        for (Distribution dist : {Distribution::kGaussian, Distribution::kStudentT3, Distribution::kBlockScaled}) {
          const float g = format == BlockFormat::kNvfp4 ? std::exp2(log_g(rng)) : 1.0f;
          run_case({format, dtype, rows, cols, cols + pad, dist, g}, rng);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Dequantization of arbitrary bytes, not only of what the quantizer writes: negative and NaN
// E4M3 scales, E2M1 -0, MXFP8 NaN values under finite scales, every UE8M0 code.
TEST_F(QuantizeKernels, DequantizeArbitraryBytesMatchesCpu) {
  auto rng = testing::seeded_rng(2);
  std::uniform_int_distribution<int> byte(0, 255);
  for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const int64_t rows = 37, cols = 4096;
      const int64_t value_bytes = format == BlockFormat::kNvfp4 ? rows * cols / 2 : rows * cols;
      std::vector<uint8_t> values(value_bytes), scales(rows * cols / block_elems(format));
      for (auto& v : values) v = static_cast<uint8_t>(byte(rng));
      for (auto& s : scales) s = static_cast<uint8_t>(byte(rng));
      const float g = format == BlockFormat::kNvfp4 ? 0.37f : 1.0f;
      const size_t out_bytes = static_cast<size_t>(rows * cols * (dtype_bits(dtype) / 8));
      std::vector<uint8_t> ref(out_bytes), got(out_bytes);
      DequantizeParams d{values.data(), scales.data(), g, rows, cols, ref.data(), dtype, cols};
      cpu::dequantize(format, d);
      cuda::DeviceBuffer d_values(values.size()), d_scales(scales.size()), d_out(out_bytes);
      d_values.upload(values.data(), values.size());
      d_scales.upload(scales.data(), scales.size());
      d_out.fill(0xA5);
      DequantizeParams dd = d;
      dd.values = d_values.as<uint8_t>();
      dd.scales = d_scales.as<uint8_t>();
      dd.output = d_out.data();
      cuda::dequantize(format, dd, nullptr);
      FP4_CUDA_CHECK(cudaDeviceSynchronize());
      d_out.download(got.data(), out_bytes);
      for (size_t i = 0; i < out_bytes; ++i)
        ASSERT_EQ(got[i], ref[i]) << block_format_name(format) << " " << dtype_name(dtype) << " byte " << i;
    }
  }
}

TEST_F(QuantizeKernels, EmptyTensorsLaunchNothing) {
  for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
    EXPECT_NO_THROW(cuda::quantize(format, {nullptr, DType::kBF16, 0, 32, 0, nullptr, nullptr, 1.0f}, nullptr));
    EXPECT_NO_THROW(cuda::dequantize(format, {nullptr, nullptr, 1.0f, 3, 0, nullptr, DType::kF32, 0}, nullptr));
  }
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_F(QuantizeKernels, RejectsMisalignedRows) {
  cuda::DeviceBuffer input(4096), values(4096), scales(4096);
  QuantizeParams q{input.as<uint8_t>() + 4, DType::kF32, 2, 32, 32, values.as<uint8_t>(), scales.as<uint8_t>(), 1.0f};
  EXPECT_THROW(cuda::quantize(BlockFormat::kNvfp4, q, nullptr), Error);
  q.input = input.data();
  q.input_row_stride = 33;
  EXPECT_THROW(cuda::quantize(BlockFormat::kNvfp4, q, nullptr), Error);
  q.input_row_stride = 32;
  q.values = values.as<uint8_t>() + 8;
  EXPECT_THROW(cuda::quantize(BlockFormat::kMxfp8, q, nullptr), Error);
  DequantizeParams d{values.as<uint8_t>() + 4, scales.as<uint8_t>(), 1.0f, 2, 32, input.data(), DType::kBF16, 32};
  EXPECT_THROW(cuda::dequantize(BlockFormat::kNvfp4, d, nullptr), Error);
}

}  // namespace
}  // namespace fp4
