// Raw launchers of the quantize kernels, for quantize.cpp. Params are already checked; the
// launchers only choose the template instance and report the launch status.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/quantize_params.h"

namespace fp4::cuda::detail {

constexpr int kThreads = 256;  // threads per CTA; one thread per quantization block

cudaError_t launch_quantize(BlockFormat format, const QuantizeParams& p, unsigned grid,
                            cudaStream_t stream);
cudaError_t launch_dequantize(BlockFormat format, const DequantizeParams& p, unsigned grid,
                              cudaStream_t stream);

}  // namespace fp4::cuda::detail
