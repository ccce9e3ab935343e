// Contract of the block-quantization ops (NVFP4 and MXFP8 over row-major matrices). The same
// params struct goes to the CPU reference and to the CUDA kernels; pointers are host or device
// memory accordingly. Layouts: docs/formats/nvfp4.md, docs/formats/mxfp8.md.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace fp4 {

enum class BlockFormat : uint8_t { kNvfp4, kMxfp8 };

int block_elems(BlockFormat format);      // 16 or 32
const char* block_format_name(BlockFormat format);

struct QuantizeParams {
  const void* input = nullptr;   // [rows, cols] row-major, element stride 1, dtype input_dtype
  DType input_dtype = DType::kF32;  // kF32 or kBF16
  int64_t rows = 0;
  int64_t cols = 0;              // a multiple of the block size
  int64_t input_row_stride = 0;  // elements between rows, >= cols (unused when rows <= 1)
  uint8_t* values = nullptr;     // NVFP4: [rows, cols/2] packed E2M1; MXFP8: [rows, cols] E4M3
  uint8_t* scales = nullptr;     // NVFP4: [rows, cols/16] E4M3; MXFP8: [rows, cols/32] UE8M0
  float global_scale = 1.0f;     // NVFP4 only, dequantization direction; finite and > 0
};

struct DequantizeParams {
  const uint8_t* values = nullptr;  // as QuantizeParams::values, dense rows
  const uint8_t* scales = nullptr;  // as QuantizeParams::scales, dense rows
  float global_scale = 1.0f;        // NVFP4 only
  int64_t rows = 0;
  int64_t cols = 0;
  void* output = nullptr;            // [rows, cols] row-major, dtype output_dtype
  DType output_dtype = DType::kF32;  // kF32 or kBF16 (RNE from the fp32 value)
  int64_t output_row_stride = 0;     // elements between rows, >= cols (unused when rows <= 1)
};

// True when there is nothing to do (rows or cols is 0); the checks then skip the pointers.
inline bool is_empty(int64_t rows, int64_t cols) { return rows == 0 || cols == 0; }

// Throw fp4::Error naming the first field that breaks the contract. `vector_bytes` is the
// alignment the caller needs of the input/output rows (1 for the CPU, 16 for the CUDA kernels).
void check_quantize_params(BlockFormat format, const QuantizeParams& p, int vector_bytes);
void check_dequantize_params(BlockFormat format, const DequantizeParams& p, int vector_bytes);

}  // namespace fp4
