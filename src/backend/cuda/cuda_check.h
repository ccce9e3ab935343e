// Every CUDA runtime call and every launch is checked; a failure throws fp4::InternalError
// naming the call and the runtime's message.
#pragma once

#include <cuda_runtime_api.h>

#include "core/check.h"

#define FP4_CUDA_CHECK(expr)                                                             \
  do {                                                                                   \
    const cudaError_t fp4_cuda_status = (expr);                                          \
    if (fp4_cuda_status != cudaSuccess)                                                  \
      ::fp4::fail_internal("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(fp4_cuda_status), \
                  cudaGetErrorString(fp4_cuda_status), #expr, __FILE__, __LINE__);      \
  } while (0)

