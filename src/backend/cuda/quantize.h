// CUDA block-quantization kernels (sm_90a). Same contract and same bits as fp4::cpu::quantize /
// dequantize: both run the block functions of formats/nvfp4.h and formats/mxfp8.h.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/quantize_params.h"

namespace fp4::cuda {

// Pointers in `p` are device pointers. Rows of the float side and the value array must start
// on 16-byte boundaries (checked). Asynchronous on `stream`.
void quantize(BlockFormat format, const QuantizeParams& p, cudaStream_t stream);
void dequantize(BlockFormat format, const DequantizeParams& p, cudaStream_t stream);

}  // namespace fp4::cuda
