// The kernels convert to E4M3 with the hardware's paired cvt.rn.satfinite.e4m3x2.f32. It must
// give the bits of our e4m3_encode (itself proven equal to the toolkit's host routine on all
// floats) for every one of the 2^32 float inputs, in both lanes of the pair; on the GPU that
// takes milliseconds.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include "formats/minifloat.h"

namespace fp4 {
namespace {

__global__ void compare_all_floats(unsigned long long* mismatches, unsigned int* first_bad) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const float f = __uint_as_float(static_cast<uint32_t>(i));
    const float partner = __uint_as_float(static_cast<uint32_t>(i) ^ 0x9E3779B9u);  // another input
    // As the kernels call it: .x is the low byte, .y the high byte.
    const uint32_t lo_hi = __nv_cvt_float2_to_fp8x2(make_float2(f, partner), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi_lo = __nv_cvt_float2_to_fp8x2(make_float2(partner, f), __NV_SATFINITE, __NV_E4M3);
    const uint32_t want = e4m3_encode(f);
    if ((lo_hi & 0xFFu) != want || (hi_lo >> 8) != want || (lo_hi >> 8) != e4m3_encode(partner)) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first_bad, static_cast<uint32_t>(i));
    }
  }
}

TEST(E4M3Hardware, MatchesEncoderOnAllFloats) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no CUDA device visible";
  }
  unsigned long long* mismatches;
  unsigned int* first_bad;
  ASSERT_EQ(cudaMalloc(&mismatches, sizeof *mismatches), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&first_bad, sizeof *first_bad), cudaSuccess);
  ASSERT_EQ(cudaMemset(mismatches, 0, sizeof *mismatches), cudaSuccess);
  ASSERT_EQ(cudaMemset(first_bad, 0xFF, sizeof *first_bad), cudaSuccess);
  compare_all_floats<<<132 * 16, 256>>>(mismatches, first_bad);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned long long count = 0;
  unsigned int first = 0;
  ASSERT_EQ(cudaMemcpy(&count, mismatches, sizeof count, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&first, first_bad, sizeof first, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(count, 0u) << "first mismatching float bits 0x" << std::hex << first;
  cudaFree(mismatches);
  cudaFree(first_bad);
}

}  // namespace
}  // namespace fp4
