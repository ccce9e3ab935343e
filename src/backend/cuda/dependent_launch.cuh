// Programmatic dependent launch (sm_90): a kernel launched by launch_dependent may start while
// the kernel before it in the stream still runs, once every CTA of that one has called
// allow_dependent_launch() (or exited); before it reads anything that kernel writes it must
// call wait_for_prerequisite_grid(), which returns when that kernel has finished and its writes
// are visible. Both are no-ops in a launch made without the attribute. Stream capture keeps the
// attribute, so a CUDA graph replays the same overlap.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace fp4::cuda::detail {

__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_prerequisite_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace fp4::cuda::detail
