// What kernel launchers ask of the current device, in a header CUDA sources can include (device.h
// brings the host-only timing helpers with it).
#pragma once

#include <cuda_runtime_api.h>

namespace fp4::cuda {

// The current device's SM count, for launchers that size their grids by it (an attribute query,
// cheap enough for every launch; launchers report errors as cudaError_t).
cudaError_t current_device_multiprocessors(int* sms);

}  // namespace fp4::cuda
