#include "backend/quantize_params.h"

#include <cfloat>
#include <cmath>

#include "core/check.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"

namespace fp4 {

int block_elems(BlockFormat format) {
  return format == BlockFormat::kNvfp4 ? kNvfp4BlockElems : kMxfp8BlockElems;
}

const char* block_format_name(BlockFormat format) {
  return format == BlockFormat::kNvfp4 ? "nvfp4" : "mxfp8";
}

namespace {

int element_bytes(DType t) { return dtype_bits(t) / 8; }

// The largest float-side extent (rows x stride elements) accepted: far beyond any device, and
// small enough that every byte offset the backends compute fits in int64_t.
constexpr int64_t kMaxElements = int64_t{1} << 56;

void check_shape(BlockFormat format, int64_t rows, int64_t cols, int64_t row_stride,
                 const char* stride_name) {
  const int block = block_elems(format);
  FP4_CHECK(rows >= 0 && cols >= 0, "{}: rows={} cols={} must be non-negative",
            block_format_name(format), rows, cols);
  FP4_CHECK(cols % block == 0, "{}: cols={} must be a multiple of the block size {}",
            block_format_name(format), cols, block);
  if (rows <= 1) return;  // a single row's stride is never used
  FP4_CHECK(row_stride >= cols, "{}: {}={} must be >= cols={}", block_format_name(format),
            stride_name, row_stride, cols);
  FP4_CHECK(row_stride <= kMaxElements / rows, "{}: rows={} x {}={} exceeds 2^56 elements",
            block_format_name(format), rows, stride_name, row_stride);
}

void check_float_dtype(DType t, const char* what) {
  FP4_CHECK(t == DType::kF32 || t == DType::kBF16, "{} dtype {} unsupported (expected f32 or bf16)",
            what, dtype_name(t));
}

void check_alignment(const void* ptr, int64_t rows, int64_t row_stride, DType t,
                     int vector_bytes, const char* what) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (rows <= 1) row_stride = 0;
  FP4_CHECK(addr % vector_bytes == 0 && (row_stride * element_bytes(t)) % vector_bytes == 0,
            "{} rows must start on {}-byte boundaries (pointer {:#x}, row stride {} elements)",
            what, vector_bytes, addr, row_stride);
}

void check_global_scale(BlockFormat format, float g) {
  if (format == BlockFormat::kNvfp4)
    // 6 * g must stay finite too: it divides every block's amax.
    FP4_CHECK(std::isfinite(kE2M1Max * g) && g > 0.0f,
              "nvfp4: global_scale={} must be > 0 and at most {:g}", g, FLT_MAX / kE2M1Max);
}

}  // namespace

void check_quantize_params(BlockFormat format, const QuantizeParams& p, int vector_bytes) {
  check_shape(format, p.rows, p.cols, p.input_row_stride, "input_row_stride");
  check_float_dtype(p.input_dtype, "input");
  check_global_scale(format, p.global_scale);
  if (p.rows == 0 || p.cols == 0) return;
  FP4_CHECK(p.input && p.values && p.scales, "{}: input, values and scales must be non-null",
            block_format_name(format));
  check_alignment(p.input, p.rows, p.input_row_stride, p.input_dtype, vector_bytes, "input");
  check_alignment(p.values, 1, 0, DType::kU8, vector_bytes, "values");
}

void check_dequantize_params(BlockFormat format, const DequantizeParams& p, int vector_bytes) {
  check_shape(format, p.rows, p.cols, p.output_row_stride, "output_row_stride");
  check_float_dtype(p.output_dtype, "output");
  check_global_scale(format, p.global_scale);
  if (p.rows == 0 || p.cols == 0) return;
  FP4_CHECK(p.values && p.scales && p.output, "{}: values, scales and output must be non-null",
            block_format_name(format));
  check_alignment(p.output, p.rows, p.output_row_stride, p.output_dtype, vector_bytes, "output");
  check_alignment(p.values, 1, 0, DType::kU8, vector_bytes, "values");
}

}  // namespace fp4
