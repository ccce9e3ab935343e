// CPU reference of the block-quantization ops: the oracle the CUDA kernels are tested against,
// and the path the converter and the CPU engine use. Multi-threaded over rows.
#pragma once

#include "backend/quantize_params.h"

namespace fp4::cpu {

void quantize(BlockFormat format, const QuantizeParams& p);
void dequantize(BlockFormat format, const DequantizeParams& p);

}  // namespace fp4::cpu
