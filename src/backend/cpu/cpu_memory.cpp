// The CPU backend's memory is the host's: aligned allocations and plain copies.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cpu/cpu_backend.h"

namespace fp4::cpu {

void* CpuBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  constexpr size_t kAlign = 256;
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void CpuBackend::release(void* p) noexcept { std::free(p); }

void CpuBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

}  // namespace fp4::cpu
