// Host-side helpers for the CUDA backend: device discovery, owned device buffers, event timing.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "backend/cuda/device_query.h"

namespace fp4::cuda {

// Number of visible CUDA devices; 0 (not an error) when there is no driver or no GPU.
int device_count();

struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t global_memory_bytes = 0;
  size_t l2_bytes = 0;
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
};
DeviceInfo device_info(int device = 0);

// Makes the device's default memory pool keep what is freed to it instead of handing it back to
// the driver at every synchronization, so that a stream-ordered allocation (an op's scratch) is
// a pool lookup, not a fresh mapping each time. The engine's backend and the benchmarks set it.
void keep_freed_memory_in_pool(int device = 0);

// An owned cudaMalloc allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  void fill(unsigned char byte);

  // A buffer holding a copy of `host`; at least 16 bytes, so that an empty vector still gives a
  // valid, aligned pointer.
  template <typename T>
  static DeviceBuffer copy_of(const std::vector<T>& host) {
    DeviceBuffer d(std::max<size_t>(host.size() * sizeof(T), 16));
    if (!host.empty()) d.upload(host.data(), host.size() * sizeof(T));
    return d;
  }
  // The first n elements, as T.
  template <typename T>
  std::vector<T> download_vector(size_t n) const {
    std::vector<T> v(n);
    if (n > 0) download(v.data(), n * sizeof(T));
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Median time in milliseconds of `reps` launches of fn(stream), each bracketed by events,
// after `warmup` untimed launches.
template <typename Fn>
double median_ms(Fn&& fn, int warmup, int reps, cudaStream_t stream = nullptr);

// Median time in milliseconds of one replay of a CUDA graph of what fn(stream) enqueues,
// captured once on a stream of its own: kernels back to back with no host launch between
// them, as the engine's decode graphs run. `reps` timed replays after `warmup`.
template <typename Fn>
double median_graph_ms(Fn&& fn, int warmup, int reps);

double median_of(std::vector<double> samples);

}  // namespace fp4::cuda

#include "backend/cuda/device_timing.inl"
