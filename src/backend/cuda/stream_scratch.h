// Scratch from the stream-ordered allocator around one asynchronous call, for the ops' overloads
// that take no workspace: allocated on `stream` (nothing for 0 bytes), handed to `call`, and freed
// on `stream` after it, also when it throws. Both are capturable in a CUDA graph, where they
// become memory nodes (CudaBackend passes its own workspace instead: recording.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {

template <typename Call>
void with_stream_scratch(size_t bytes, cudaStream_t stream, Call&& call) {
  void* scratch = nullptr;
  if (bytes > 0) FP4_CUDA_CHECK(cudaMallocAsync(&scratch, bytes, stream));
  try {
    call(scratch, bytes);
  } catch (...) {
    if (scratch != nullptr) (void)cudaFreeAsync(scratch, stream);
    throw;
  }
  if (scratch != nullptr) FP4_CUDA_CHECK(cudaFreeAsync(scratch, stream));
}

}  // namespace fp4::cuda
