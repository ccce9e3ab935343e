#include "backend/cpu/quantize.h"

#include <cstring>

#include "core/thread_pool.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"

namespace fp4::cpu {
namespace {

// Through memcpy: callers hand over raw byte buffers, whatever their declared element type.
float load_element(const void* row, DType dtype, int64_t i) {
  if (dtype == DType::kBF16) {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(row) + 2 * i, 2);
    return bf16_decode(h);
  }
  float f;
  std::memcpy(&f, static_cast<const uint8_t*>(row) + 4 * i, 4);
  return f;
}

void store_element(void* row, DType dtype, int64_t i, float v) {
  if (dtype == DType::kBF16) {
    const uint16_t h = bf16_encode(v);
    std::memcpy(static_cast<uint8_t*>(row) + 2 * i, &h, 2);
  } else {
    std::memcpy(static_cast<uint8_t*>(row) + 4 * i, &v, 4);
  }
}

int64_t input_row_bytes(DType dtype, int64_t stride) { return stride * (dtype_bits(dtype) / 8); }

// Rows are independent; each thread takes a contiguous run of rows.
template <typename Fn>
void for_each_row(int64_t rows, int64_t cols, Fn&& fn) {
  // Small problems stay on one thread: thread start-up would dominate.
  const int threads = rows * cols < (int64_t{1} << 16) ? 1 : 0;
  parallel_for(
      rows, [&](int64_t begin, int64_t end) { for (int64_t r = begin; r < end; ++r) fn(r); },
      threads);
}

}  // namespace

void quantize(BlockFormat format, const QuantizeParams& p) {
  check_quantize_params(format, p, 1);
  if (is_empty(p.rows, p.cols)) return;
  const int block = block_elems(format);
  const int64_t blocks_per_row = p.cols / block;
  const int64_t value_bytes_per_row = format == BlockFormat::kNvfp4 ? p.cols / 2 : p.cols;
  for_each_row(p.rows, p.cols, [&](int64_t r) {
    const auto* in = static_cast<const uint8_t*>(p.input) + r * input_row_bytes(p.input_dtype, p.input_row_stride);
    uint8_t* values = p.values + r * value_bytes_per_row;
    uint8_t* scales = p.scales + r * blocks_per_row;
    float x[kMxfp8BlockElems];
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      for (int i = 0; i < block; ++i) x[i] = load_element(in, p.input_dtype, b * block + i);
      if (format == BlockFormat::kNvfp4) {
        scales[b] = nvfp4_quantize_block(x, p.global_scale, values + b * kNvfp4BlockCodeBytes);
      } else {
        scales[b] = mxfp8_quantize_block(x, values + b * kMxfp8BlockElems);
      }
    }
  });
}

void dequantize(BlockFormat format, const DequantizeParams& p) {
  check_dequantize_params(format, p, 1);
  if (is_empty(p.rows, p.cols)) return;
  const int block = block_elems(format);
  const int64_t blocks_per_row = p.cols / block;
  const int64_t value_bytes_per_row = format == BlockFormat::kNvfp4 ? p.cols / 2 : p.cols;
  const int64_t out_row_bytes = input_row_bytes(p.output_dtype, p.output_row_stride);
  for_each_row(p.rows, p.cols, [&](int64_t r) {
    const uint8_t* values = p.values + r * value_bytes_per_row;
    const uint8_t* scales = p.scales + r * blocks_per_row;
    void* out = static_cast<uint8_t*>(p.output) + r * out_row_bytes;
    float x[kMxfp8BlockElems];
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      if (format == BlockFormat::kNvfp4) {
        nvfp4_dequantize_block(values + b * kNvfp4BlockCodeBytes, scales[b], p.global_scale, x);
      } else {
        mxfp8_dequantize_block(values + b * kMxfp8BlockElems, scales[b], x);
      }
      for (int i = 0; i < block; ++i) store_element(out, p.output_dtype, b * block + i, x[i]);
    }
  });
}

}  // namespace fp4::cpu
