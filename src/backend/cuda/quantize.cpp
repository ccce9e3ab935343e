#include "backend/cuda/quantize.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quantize_launch.h"

namespace fp4::cuda {
namespace {

unsigned grid_for(int64_t rows, int64_t cols, DType float_dtype) {
  // The kernels index a row's vectors with 32-bit arithmetic.
  FP4_CHECK(cols < (int64_t{1} << 31), "cols={} exceeds the kernels' limit of 2^31", cols);
  const int64_t grid = detail::grid_size(rows, cols, dtype_bits(float_dtype) / 8);
  FP4_CHECK(grid < (int64_t{1} << 31), "a {}x{} tensor is too large for one launch", rows, cols);
  return static_cast<unsigned>(grid);
}

}  // namespace

void quantize(BlockFormat format, const QuantizeParams& p, cudaStream_t stream) {
  check_quantize_params(format, p, 16);
  if (is_empty(p.rows, p.cols)) return;
  FP4_CUDA_CHECK(detail::launch_quantize(format, p, grid_for(p.rows, p.cols, p.input_dtype), stream));
}

void dequantize(BlockFormat format, const DequantizeParams& p, cudaStream_t stream) {
  check_dequantize_params(format, p, 16);
  if (is_empty(p.rows, p.cols)) return;
  FP4_CUDA_CHECK(detail::launch_dequantize(format, p, grid_for(p.rows, p.cols, p.output_dtype), stream));
}

}  // namespace fp4::cuda
