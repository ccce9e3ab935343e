#include "backend/cuda/quantize.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quantize_launch.h"

namespace fp4::cuda {
namespace {

unsigned grid_for(int64_t rows, int64_t cols, int block) {
  const int64_t total = rows * (cols / block);
  const int64_t grid = (total + detail::kThreads - 1) / detail::kThreads;
  FP4_CHECK(grid < (int64_t{1} << 31), "a tensor of {} blocks is too large for one launch", total);
  return static_cast<unsigned>(grid);
}

}  // namespace

void quantize(BlockFormat format, const QuantizeParams& p, cudaStream_t stream) {
  check_quantize_params(format, p, 16);
  if (p.rows * p.cols == 0) return;
  FP4_CUDA_CHECK(detail::launch_quantize(format, p, grid_for(p.rows, p.cols, block_elems(format)), stream));
}

void dequantize(BlockFormat format, const DequantizeParams& p, cudaStream_t stream) {
  check_dequantize_params(format, p, 16);
  if (p.rows * p.cols == 0) return;
  FP4_CUDA_CHECK(detail::launch_dequantize(format, p, grid_for(p.rows, p.cols, block_elems(format)), stream));
}

}  // namespace fp4::cuda
