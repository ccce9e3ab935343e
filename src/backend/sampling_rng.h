// The random stream of a request: counter-based, so the draw for a token depends only on
// (seed, step), where step is the number of tokens the request has sampled before. A request
// therefore gets the same tokens whatever batch it runs in and after a preemption that
// recomputes it. Host and device code (the CUDA sampler, backend/cuda/sampler.cu, reproduces it bit
// for bit); it lives in backend/ for that reason, below the sampling layer that also uses it.
//
// random_bits(seed, step) is output number `step` (0-based) of SplitMix64 (Steele, Lea and
// Flood 2014, the finalizer of Stafford's "Mix13") started from state `seed`:
//   z = seed + (step + 1) * 0x9E3779B97F4A7C15        (mod 2^64)
//   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9            (mod 2^64)
//   z = (z ^ (z >> 27)) * 0x94D049BB133111EB            (mod 2^64)
//   return z ^ (z >> 31)
// One draw is used per sampled token: uniform_below(bits, n) maps it to [0, n) as the high 64
// bits of the 128-bit product bits * n (bias below n / 2^64).
#pragma once

#include <cstdint>

#include "formats/hd.h"

namespace fp4::sampling {

inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

FP4_HD constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

FP4_HD constexpr uint64_t random_bits(uint64_t seed, int64_t step) {
  return splitmix64_mix(seed + (static_cast<uint64_t>(step) + 1) * kSplitMix64Gamma);
}

FP4_HD constexpr uint64_t uniform_below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

}  // namespace fp4::sampling
